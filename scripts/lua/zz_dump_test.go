package lua

import (
	"os"
	"path/filepath"
	"testing"
)

func TestZZDump(t *testing.T) {
	dir := os.Getenv("DUMP_DIR")
	if dir == "" {
		t.Skip()
	}
	for _, n := range []string{"sem_acquire", "sem_release", "acquire", "release", "sem_renew", "sem_inspect"} {
		if err := os.WriteFile(filepath.Join(dir, n+".lua"), []byte(Source(n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
