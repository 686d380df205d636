package ratelimit

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
)

// argvPerRequest counts the ARGV entries a rate-limit script's header
// documents per request i (ARGV[3i-2], ARGV[3i-1], ARGV[3i]), and checks
// the header lists no other ARGV.
func argvPerRequest(t *testing.T, name, src string) int {
	t.Helper()
	re := regexp.MustCompile(`^-- ARGV\[([^\]]+)\]`)
	per := 0
	for line := range strings.Lines(src) {
		if !strings.HasPrefix(line, "--") {
			break // the header ends at the first line of code
		}
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if !strings.Contains(m[1], "i") {
			t.Fatalf("%s: ARGV[%s] is not per request", name, m[1])
		}
		per++
	}
	if per == 0 {
		t.Fatalf("%s: the header lists no ARGV", name)
	}
	return per
}

// TestScriptArgsMatchTheirHeaders keeps each rate-limit script's ARGV
// builder and the ARGV its header documents the same length per request.
func TestScriptArgsMatchTheirHeaders(t *testing.T) {
	for alg, src := range map[Algorithm]string{
		FixedWindow:   lua.Source("ratelimit_fixed_window"),
		SlidingWindow: lua.Source("ratelimit_sliding_window"),
		TokenBucket:   lua.Source("ratelimit_token_bucket"),
	} {
		name := limitScripts[alg].Name() + ".lua"
		_, n := requestArgs(Limit{Algorithm: alg, Limit: 10, Window: time.Minute}, 1)
		if want := argvPerRequest(t, name, src); n != want {
			t.Errorf("%s: the Go builder makes %d ARGV entries per request, the header documents %d", name, n, want)
		}
	}
}
