package auth_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/latchkey/latchkey/service/auth"
)

// fileVar is a keys file held in memory, as KeysConfig.Read reads it.
type fileVar struct {
	mu sync.Mutex
	b  string
}

func (f *fileVar) set(b string) { f.mu.Lock(); f.b = b; f.mu.Unlock() }
func (f *fileVar) read() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []byte(f.b), nil
}

// TestKeysFileNamingNoKey: a file that names no key is refused at start,
// and on reload it leaves the active keys as they were, as a file that
// cannot be read or has a value of the wrong kind does: no request is
// refused for it.
func TestKeysFileNamingNoKey(t *testing.T) {
	file := &fileVar{}
	if _, err := auth.LoadKeys(auth.KeysConfig{Path: "keys.yaml", Read: file.read}); err == nil || !strings.Contains(err.Error(), "keys.yaml: keys file: it names no key") {
		t.Fatalf("LoadKeys(empty file) = %v, want a refusal naming the file", err)
	}
	good := "admin:\n  keys:\n    - {id: ops, sha256: " + sha("ops-secret") + ", scopes: [admin]}\n"
	file.set(good)
	keys, err := auth.LoadKeys(auth.KeysConfig{Path: "keys.yaml", Read: file.read})
	if err != nil {
		t.Fatal(err)
	}
	active := keys.Current()
	loaded := keys.Loaded()
	for _, bad := range []string{"", "tenants:\n  billing:\n    keys: []\n", "admin:\n  kyes: []\n", "tenants: [a, b]\n", "admin:\n  keys: {id: ops}\n"} {
		file.set(bad)
		changed, err := keys.Reload(false)
		if changed || err == nil {
			t.Errorf("Reload(%q) = %v, %v; want it refused", bad, changed, err)
		}
		if keys.Current() != active || keys.Current().Lookup("ops-secret") == nil {
			t.Errorf("after Reload(%q) the active set changed; want it kept", bad)
		}
	}
	select {
	case <-loaded:
		t.Error("Loaded closed: a refused file was made active")
	default:
	}
	file.set(good + "# rotated\n")
	if changed, err := keys.Reload(false); !changed || err != nil {
		t.Errorf("Reload(good file) = %v, %v; want it active", changed, err)
	}
}
