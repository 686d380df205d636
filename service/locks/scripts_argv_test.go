package locks

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
)

// argvLayout reads the ARGV entries a script's header comment lists: fixed
// is the highest plain index (ARGV[3]), perEntry the number of entries given
// per batch entry i (ARGV[1+i], ARGV[3i-2] ...).
func argvLayout(t *testing.T, name, src string) (fixed, perEntry int) {
	t.Helper()
	re := regexp.MustCompile(`^-- ARGV\[([^\]]+)\]`)
	for line := range strings.Lines(src) {
		if !strings.HasPrefix(line, "--") {
			break // the header ends at the first line of code
		}
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if !strings.Contains(m[1], "i") {
			n, err := strconv.Atoi(m[1])
			if err != nil {
				t.Fatalf("%s: ARGV[%s] is neither a number nor a per-entry index", name, m[1])
			}
			fixed = max(fixed, n)
			continue
		}
		perEntry++
	}
	if fixed == 0 && perEntry == 0 {
		t.Fatalf("%s: the header lists no ARGV", name)
	}
	return fixed, perEntry
}

// TestScriptArgsMatchTheirHeaders keeps each lock script's ARGV builder and
// the ARGV its header comment documents the same length, so neither drifts
// from the other.
func TestScriptArgsMatchTheirHeaders(t *testing.T) {
	cfg := Config{}.withDefaults()
	req := AcquireRequest{Token: "tokenAAAAAAAAAAAAAAAAAA", TTL: time.Second}
	members := []string{"a:x", "b:y", "c:z"}
	tests := []struct {
		name    string
		src     string
		args    []any
		entries int // batch entries in args
	}{
		{"acquire.lua", lua.Source("acquire"), acquireArgs(cfg, kindMutex, req, "orders", time.Second, true, 0), 0},
		{"release.lua", lua.Source("release"), releaseArgs(cfg, kindMutex, "orders", req.Token), 0},
		{"renew.lua", lua.Source("renew"), renewArgs(cfg, kindMutex, "orders", req.Token, time.Second, 0), 0},
		{"inspect.lua", lua.Source("inspect"), inspectArgs(kindMutex, "orders", req.Token), 0},
		{"force_release.lua", lua.Source("force_release"), forceReleaseArgs(cfg, "orders"), 0},
		{"leave.lua", lua.Source("leave"), leaveArgs(req.Token), 0},
		{"keepalive_due.lua", lua.Source("keepalive_due"), keepaliveDueArgs(10), 0},
		{"renew_batch.lua", lua.Source("renew_batch"), renewBatchArgs(cfg, members), len(members)},
		{"rw_acquire.lua", lua.Source("rw_acquire"), rwAcquireArgs(cfg, req, "orders", time.Second, true, true), 0},
		{"rw_release.lua", lua.Source("rw_release"), rwReleaseArgs(cfg, "orders", req.Token, ModeRead), 0},
		{"rw_renew.lua", lua.Source("rw_renew"), rwRenewArgs(cfg, "orders", req.Token, "", time.Second), 0},
		{"rw_inspect.lua", lua.Source("rw_inspect"), heldInspectArgs(kindRW, "orders", req.Token, MaxListedLeases), 0},
		{"rw_force_release.lua", lua.Source("rw_force_release"), forceReleaseArgs(cfg, "orders"), 0},
		{"rw_leave.lua", lua.Source("rw_leave"), leaveArgs(req.Token), 0},
		{"rw_renew_batch.lua", lua.Source("rw_renew_batch"), renewBatchArgs(cfg, members), len(members)},
	}
	for _, tt := range tests {
		fixed, per := argvLayout(t, tt.name, tt.src)
		if want := fixed + per*tt.entries; len(tt.args) != want {
			t.Errorf("%s: the Go builder makes %d ARGV entries, the header documents %d (%d + %d per entry × %d)",
				tt.name, len(tt.args), want, fixed, per, tt.entries)
		}
	}
}

// TestScriptFlags checks the booleans reach the scripts as "1" and "0".
func TestScriptFlags(t *testing.T) {
	cfg := Config{}.withDefaults()
	on := acquireArgs(cfg, kindMutex, AcquireRequest{Fair: true, Keepalive: true}, "orders", 0, true, 0)
	off := acquireArgs(cfg, kindMutex, AcquireRequest{}, "orders", 0, false, 0)
	for _, i := range []int{4, 6, 11} { // ARGV[i] is args[i-1]
		if on[i-1] != "1" || off[i-1] != "0" {
			t.Errorf("ARGV[%d] = %v when true, %v when false; want \"1\" and \"0\"", i, on[i-1], off[i-1])
		}
	}
}
