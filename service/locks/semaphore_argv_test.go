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
	members := []string{semMember(req.Token, "a"), semMember(req.Token, "b")}
	tests := []struct {
		name    string
		src     string
		args    []any
		entries int // batch entries in args
	}{
		{"sem_acquire.lua", lua.Source("sem_acquire"), semAcquireArgs(cfg, req, "pool", time.Second, true), 0},
		{"sem_release.lua", lua.Source("sem_release"), releaseArgs(cfg, kindSem, "pool", req.Token), 0},
		{"sem_renew.lua", lua.Source("sem_renew"), renewArgs(cfg, kindSem, "pool", req.Token, time.Second, 0), 0},
		{"sem_inspect.lua", lua.Source("sem_inspect"), heldInspectArgs(kindSem, "pool", req.Token, MaxListedLeases), 0},
		{"sem_force_release.lua", lua.Source("sem_force_release"), semForceReleaseArgs(cfg, "pool"), 0},
		{"sem_set_permits.lua", lua.Source("sem_set_permits"), semSetPermitsArgs(cfg, 8), 0},
		{"sem_leave.lua", lua.Source("sem_leave"), leaveArgs(req.Token), 0},
		{"sem_renew_batch.lua", lua.Source("sem_renew_batch"), renewBatchArgs(cfg, members), len(members)},
	}
	for _, tt := range tests {
		fixed, per := argvLayout(t, tt.name, tt.src)
		if want := fixed + per*tt.entries; len(tt.args) != want {
			t.Errorf("%s: the Go builder makes %d ARGV entries, the header documents %d", tt.name, len(tt.args), want)
		}
	}
}

// TestSharedArgsCarryTheKindsMember checks that the ARGV builders the
// primitives share put the registry member of the caller's kind where each
// script reads it, and none for an inspect without a token.
func TestSharedArgsCarryTheKindsMember(t *testing.T) {
	cfg := Config{}.withDefaults()
	tok := "tokenAAAAAAAAAAAAAAAAAA"
	req := SemaphoreRequest{AcquireRequest: AcquireRequest{Token: tok, TTL: time.Second}, Permits: 8, Count: 2}
	tests := []struct {
		name string
		got  any
		want string
	}{
		{"acquire ARGV[9]", acquireArgs(cfg, kindMutex, req.AcquireRequest, "pool", 0, false, 0)[8], registryMember(tok, "pool")},
		{"rw_acquire ARGV[9]", rwAcquireArgs(cfg, req.AcquireRequest, "pool", 0, false, false)[8], kindRW.member(tok, "pool")},
		{"sem_acquire ARGV[9]", semAcquireArgs(cfg, req, "pool", 0, false)[8], semMember(tok, "pool")},
		{"sem_release ARGV[2]", releaseArgs(cfg, kindSem, "pool", tok)[1], semMember(tok, "pool")},
		{"sem_renew ARGV[4]", renewArgs(cfg, kindSem, "pool", tok, 0, 0)[3], semMember(tok, "pool")},
		{"rw_renew ARGV[4]", rwRenewArgs(cfg, "pool", tok, "", 0)[3], kindRW.member(tok, "pool")},
		{"sem_inspect ARGV[2]", inspectArgs(kindSem, "pool", tok)[1], semMember(tok, "pool")},
		{"sem_inspect ARGV[2] without a token", inspectArgs(kindSem, "pool", "")[1], ""},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %q", tt.name, tt.got, tt.want)
		}
	}
}
