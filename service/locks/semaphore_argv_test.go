package locks

import (
	"testing"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
)

// TestSemaphoreScriptArgsMatchTheirHeaders keeps each semaphore script's
// ARGV builder and the ARGV its header documents the same length.
func TestSemaphoreScriptArgsMatchTheirHeaders(t *testing.T) {
	cfg := Config{}.withDefaults()
	req := SemaphoreRequest{AcquireRequest: AcquireRequest{Token: "tokenAAAAAAAAAAAAAAAAAA", TTL: time.Second}, Permits: 8, Count: 2}
	m := semMember(req.Token, "pool")
	members := []string{semMember(req.Token, "a"), semMember(req.Token, "b")}
	tests := []struct {
		name    string
		src     string
		args    []any
		entries int // batch entries in args
	}{
		{"sem_acquire.lua", lua.SemAcquire, semAcquireArgs(cfg, req, m, time.Second), 0},
		{"sem_release.lua", lua.SemRelease, semReleaseArgs(req.Token, m), 0},
		{"sem_renew.lua", lua.SemRenew, semRenewArgs(cfg, req.Token, m, time.Second), 0},
		{"sem_inspect.lua", lua.SemInspect, semInspectArgs(req.Token, m), 0},
		{"sem_force_release.lua", lua.SemForceRelease, semForceReleaseArgs(cfg, "pool"), 0},
		{"sem_set_permits.lua", lua.SemSetPermits, semSetPermitsArgs(cfg, 8), 0},
		{"sem_leave.lua", lua.SemLeave, semLeaveArgs(req.Token), 0},
		{"sem_renew_batch.lua", lua.SemRenewBatch, renewBatchArgs(cfg, members), len(members)},
	}
	for _, tt := range tests {
		fixed, per := argvLayout(t, tt.name, tt.src)
		if want := fixed + per*tt.entries; len(tt.args) != want {
			t.Errorf("%s: the Go builder makes %d ARGV entries, the header documents %d", tt.name, len(tt.args), want)
		}
	}
}
