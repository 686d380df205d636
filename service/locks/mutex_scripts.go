package locks

import "time"

// Statuses of acquire.lua's reply.
const (
	acquireGranted      = 1  // a new grant
	acquireReentered    = 2  // the token owned the lease: a reentrant grant
	acquireNotGranted   = 0  // held by another token, or a fair queue's head goes first
	acquireModeMismatch = -3 // the lock is fair and the caller is not, or the other way round
	acquireRefused      = -4 // refused by a rule of the primitive (attemptResult.refused says which)
)

// acquireArgs is acquire.lua's ARGV. waiterTimeout > 0 registers the caller
// as a waiter for that long when it is not granted; keepTTL makes a re-entry
// keep the lease's own TTL (the request gave none).
func acquireArgs(cfg Config, req AcquireRequest, name string, waiterTimeout time.Duration, keepTTL bool) []any {
	return []any{
		req.Token,                       // ARGV[1] token
		req.TTL.Milliseconds(),          // ARGV[2] lease TTL, ms
		cfg.FenceTTL.Milliseconds(),     // ARGV[3] fence retention, ms
		flag(req.Fair),                  // ARGV[4] mode: "1" fair, "0" plain
		waiterTimeout.Milliseconds(),    // ARGV[5] waiter timeout, ms (0: register nothing)
		flag(req.Keepalive),             // ARGV[6] "1" to keep the lease alive
		req.MaxHold.Milliseconds(),      // ARGV[7] keep-alive max hold, ms
		req.Heartbeat.Milliseconds(),    // ARGV[8] keep-alive heartbeat interval, ms (0: none)
		registryMember(req.Token, name), // ARGV[9] keep-alive registry member
		cfg.LostTTL.Milliseconds(),      // ARGV[10] lost-lease reasons' retention, ms
		flag(keepTTL),                   // ARGV[11] "1": a re-entry keeps the lease's own TTL
		req.Owner,                       // ARGV[12] owner text of a new grant, "" for none
	}
}

// Statuses of release.lua's and renew.lua's replies.
const (
	ownerDone    = 1  // released (release.lua) or renewed (renew.lua)
	ownerNoLease = -1 // no such lease (expired or released)
	ownerOther   = -2 // held by another token
)

// releaseArgs is release.lua's ARGV.
func releaseArgs(name, token string) []any {
	return []any{
		token,                       // ARGV[1] token
		registryMember(token, name), // ARGV[2] keep-alive registry member
	}
}

// renewArgs is renew.lua's ARGV. A ttl of 0 renews for the lease's own TTL.
func renewArgs(cfg Config, name, token string, ttl time.Duration) []any {
	return []any{
		token,                       // ARGV[1] token
		ttl.Milliseconds(),          // ARGV[2] new lease TTL, ms (0: the lease's own)
		cfg.LostTTL.Milliseconds(),  // ARGV[3] lost-lease reasons' retention, ms
		registryMember(token, name), // ARGV[4] keep-alive registry member
		cfg.FenceTTL.Milliseconds(), // ARGV[5] fence retention, ms
	}
}

// Statuses of force_release.lua's reply.
const (
	forceRemoved = 1 // a lease was removed
	forceFree    = 0 // the lock was free
)

// forceReleaseArgs is force_release.lua's ARGV.
func forceReleaseArgs(cfg Config, name string) []any {
	return []any{
		cfg.FenceTTL.Milliseconds(), // ARGV[1] fence retention, ms
		cfg.LostTTL.Milliseconds(),  // ARGV[2] lost-lease reasons' retention, ms
		name,                        // ARGV[3] lock name
	}
}

// inspectArgs is inspect.lua's ARGV. An empty token asks about no token.
func inspectArgs(name, token string) []any {
	member := ""
	if token != "" {
		member = registryMember(token, name)
	}
	return []any{
		token,  // ARGV[1] token to compare with the owner's, or ""
		member, // ARGV[2] the token's keep-alive registry member, or ""
	}
}

// leaveArgs is leave.lua's ARGV.
func leaveArgs(token string) []any {
	return []any{
		token, // ARGV[1] waiter token
	}
}
