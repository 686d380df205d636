package locks

import (
	"strings"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
)

// The semaphore's scripts (semaphore.go), registered with the lock scripts.
var (
	semAcquireScript      = store.NewScript("sem_acquire", lua.SemAcquire)
	semReleaseScript      = store.NewScript("sem_release", lua.SemRelease)
	semRenewScript        = store.NewScript("sem_renew", lua.SemRenew)
	semInspectScript      = store.NewScript("sem_inspect", lua.SemInspect)
	semForceReleaseScript = store.NewScript("sem_force_release", lua.SemForceRelease)
	semSetPermitsScript   = store.NewScript("sem_set_permits", lua.SemSetPermits)
	semLeaveScript        = store.NewScript("sem_leave", lua.SemLeave)
)

// semScripts lists the semaphore's scripts, loaded with the others.
var semScripts = []*store.Script{semAcquireScript, semReleaseScript, semRenewScript, semInspectScript,
	semForceReleaseScript, semSetPermitsScript, semLeaveScript, semRenewBatchScript}

// Statuses of sem_acquire.lua's reply.
const (
	semGranted          = 1  // the permits were granted
	semNotGranted       = 0  // too few permits free, or a fair queue's head goes first
	semModeMismatch     = -3 // the semaphore is fair and the caller is not, or the other way round
	semPermitsMismatch  = -4 // the stored capacity differs from the request's
	semTokenHoldsALease = -5 // the token already holds a lease on the semaphore
)

// semAcquireArgs is sem_acquire.lua's ARGV. waiterTimeout > 0 registers the
// caller as a waiter for that long when it is not granted.
func semAcquireArgs(cfg Config, req SemaphoreRequest, member string, waiterTimeout time.Duration) []any {
	return []any{
		req.Token,                    // ARGV[1] token
		req.TTL.Milliseconds(),       // ARGV[2] lease TTL, ms
		cfg.FenceTTL.Milliseconds(),  // ARGV[3] fence retention, ms
		flag(req.Fair),               // ARGV[4] mode: "1" fair, "0" plain
		waiterTimeout.Milliseconds(), // ARGV[5] waiter timeout, ms (0: register nothing)
		flag(req.Keepalive),          // ARGV[6] "1" to keep the lease alive
		req.MaxHold.Milliseconds(),   // ARGV[7] keep-alive max hold, ms
		req.Heartbeat.Milliseconds(), // ARGV[8] keep-alive heartbeat interval, ms (0: none)
		member,                       // ARGV[9] keep-alive registry member
		cfg.LostTTL.Milliseconds(),   // ARGV[10] lost-lease reasons' retention, ms
		req.Owner,                    // ARGV[11] owner text, "" for none
		req.Permits,                  // ARGV[12] permits N
		req.Count,                    // ARGV[13] count k
	}
}

// Statuses of sem_release.lua's and sem_renew.lua's replies are ownerDone
// and ownerNoLease (mutex_scripts.go): a semaphore lease has no other owner.

// semReleaseArgs is sem_release.lua's ARGV.
func semReleaseArgs(token, member string) []any {
	return []any{
		token,  // ARGV[1] token
		member, // ARGV[2] keep-alive registry member
	}
}

// semRenewArgs is sem_renew.lua's ARGV. A ttl of 0 renews for the lease's own TTL.
func semRenewArgs(cfg Config, token, member string, ttl time.Duration) []any {
	return []any{
		token,                       // ARGV[1] token
		ttl.Milliseconds(),          // ARGV[2] new lease TTL, ms (0: the lease's own)
		cfg.LostTTL.Milliseconds(),  // ARGV[3] lost-lease reasons' retention, ms
		member,                      // ARGV[4] keep-alive registry member
		cfg.FenceTTL.Milliseconds(), // ARGV[5] fence retention, ms
	}
}

// semInspectArgs is sem_inspect.lua's ARGV. An empty token asks about no token.
func semInspectArgs(token, member string) []any {
	if token == "" {
		member = ""
	}
	return []any{
		token,  // ARGV[1] token to report on, or ""
		member, // ARGV[2] the token's keep-alive registry member, or ""
	}
}

// semForceReleaseArgs is sem_force_release.lua's ARGV.
func semForceReleaseArgs(cfg Config, name string) []any {
	before, after, _ := strings.Cut(semMember("|", name), "|")
	return []any{
		cfg.FenceTTL.Milliseconds(), // ARGV[1] fence retention, ms
		cfg.LostTTL.Milliseconds(),  // ARGV[2] lost-lease reasons' retention, ms
		before,                      // ARGV[3] what precedes the token in a registry member
		after,                       // ARGV[4] what follows the token in a registry member
	}
}

// semSetPermitsArgs is sem_set_permits.lua's ARGV.
func semSetPermitsArgs(cfg Config, permits int64) []any {
	return []any{
		permits,                     // ARGV[1] the new capacity N
		cfg.FenceTTL.Milliseconds(), // ARGV[2] fence retention, ms
	}
}

// semLeaveArgs is sem_leave.lua's ARGV.
func semLeaveArgs(token string) []any {
	return []any{
		token, // ARGV[1] waiter token
	}
}
