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
	tests := []struct {
		name string
		src  string
		args []any
	}{
		{"sem_acquire.lua", lua.SemAcquire, semAcquireArgs(cfg, req, m, time.Second)},
		{"sem_release.lua", lua.SemRelease, semReleaseArgs(req.Token, m)},
		{"sem_renew.lua", lua.SemRenew, semRenewArgs(cfg, req.Token, m, time.Second)},
		{"sem_inspect.lua", lua.SemInspect, semInspectArgs(req.Token, m)},
		{"sem_force_release.lua", lua.SemForceRelease, semForceReleaseArgs(cfg, semMemberSuffix("pool"))},
		{"sem_set_permits.lua", lua.SemSetPermits, semSetPermitsArgs(cfg, 8)},
		{"sem_leave.lua", lua.SemLeave, semLeaveArgs(req.Token)},
	}
	for _, tt := range tests {
		if fixed, _ := argvLayout(t, tt.name, tt.src); len(tt.args) != fixed {
			t.Errorf("%s: the Go builder makes %d ARGV entries, the header documents %d", tt.name, len(tt.args), fixed)
		}
	}
}
