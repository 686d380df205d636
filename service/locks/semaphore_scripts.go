package locks

import (
	"strings"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
)

// semSetPermitsScript is the semaphore's script beside its leaseScripts
// (semScripts).
var semSetPermitsScript = store.NewScript("sem_set_permits", lua.Source("sem_set_permits"))

// Statuses of sem_acquire.lua's reply.
const (
	semGranted          = 1  // the permits were granted
	semNotGranted       = 0  // too few permits free, or a fair queue's head goes first
	semModeMismatch     = -3 // the semaphore is fair and the caller is not, or the other way round
	semPermitsMismatch  = -4 // the stored capacity differs from the request's
	semTokenHoldsALease = -5 // the token already holds a lease on the semaphore
)

// semAcquireArgs is sem_acquire.lua's ARGV. waiterTimeout > 0 registers the
// caller as a waiter for that long when it is not granted. Its release,
// renew, inspect and leave scripts take the exclusive lock's ARGV
// (scripts.go).
func semAcquireArgs(cfg Config, req SemaphoreRequest, name string, waiterTimeout time.Duration) []any {
	return append(acquireHead(make([]any, 0, 13), cfg, kindSem, req.AcquireRequest, name, waiterTimeout),
		req.Owner,   // ARGV[11] owner text, "" for none
		req.Permits, // ARGV[12] permits N
		req.Count,   // ARGV[13] count k
	)
}

// Statuses of sem_release.lua's and sem_renew.lua's replies are ownerDone
// and ownerNoLease (scripts.go): a semaphore lease has no other owner.

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
