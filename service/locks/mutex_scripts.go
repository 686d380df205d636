package locks

import (
	"fmt"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// Statuses of acquire.lua's reply.
const (
	acquireGranted      = 1  // a new grant
	acquireReentered    = 2  // the token owned the lease: a reentrant grant
	acquireNotGranted   = 0  // held by another token, or a fair queue's head goes first
	acquireModeMismatch = -3 // the lock is fair and the caller is not, or the other way round
	acquireRefused      = -4 // refused by a rule of the primitive (attemptResult.refused says which)
)

// acquireHead appends ARGV[1] to ARGV[10], which every primitive's acquire
// script (acquire.lua, rw_acquire.lua, sem_acquire.lua) takes alike, to
// args. waiterTimeout > 0 registers the caller as a waiter for that long
// when it is not granted; name is the lock's registry name (regName).
func acquireHead(args []any, cfg Config, kd kind, req AcquireRequest, name string, waiterTimeout time.Duration) []any {
	return append(args,
		req.Token,                    // ARGV[1] token
		req.TTL.Milliseconds(),       // ARGV[2] lease TTL, ms
		cfg.FenceTTL.Milliseconds(),  // ARGV[3] fence retention, ms
		flag(req.Fair),               // ARGV[4] mode: "1" fair, "0" plain
		waiterTimeout.Milliseconds(), // ARGV[5] waiter timeout, ms (0: register nothing)
		flag(req.Keepalive),          // ARGV[6] "1" to keep the lease alive
		req.MaxHold.Milliseconds(),   // ARGV[7] keep-alive max hold, ms
		req.Heartbeat.Milliseconds(), // ARGV[8] keep-alive heartbeat interval, ms (0: none)
		kd.member(req.Token, name),   // ARGV[9] keep-alive registry member
		cfg.LostTTL.Milliseconds(),   // ARGV[10] lost-lease reasons' retention, ms
	)
}

// acquireArgs is acquire.lua's ARGV, and the first twelve of
// rw_acquire.lua's (extra more are room for the rest). waiterTimeout > 0
// registers the caller as a waiter for that long when it is not granted;
// keepTTL makes a re-entry keep the lease's own TTL (the request gave none).
func acquireArgs(cfg Config, kd kind, req AcquireRequest, name string, waiterTimeout time.Duration, keepTTL bool, extra int) []any {
	return append(acquireHead(make([]any, 0, 12+extra), cfg, kd, req, name, waiterTimeout),
		flag(keepTTL), // ARGV[11] "1": a re-entry keeps the lease's own TTL
		req.Owner,     // ARGV[12] owner text of a new grant, "" for none
	)
}

// Statuses of release.lua's and renew.lua's replies.
const (
	ownerDone    = 1  // released (release.lua) or renewed (renew.lua)
	ownerNoLease = -1 // no such lease (expired or released)
	ownerOther   = -2 // held by another token
)

// ownerStatus maps the statuses of the release and renew scripts to errors.
func ownerStatus(status int64) error {
	switch status {
	case ownerNoLease:
		return store.ErrNotFound
	case ownerOther:
		return ErrNotOwner
	}
	return nil // ownerDone
}

// ownerReply decodes the reply of a release or renew script (op): n
// integers, the first an owner status. A non-nil err, the script's run's,
// comes back as it is. Returns ErrNotFound, ErrNotOwner, or an error for a
// reply of another shape.
func ownerReply(op string, n int, res any, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	v, err := store.Int64s(op, res, n)
	if err != nil {
		return nil, err
	}
	return v, ownerStatus(v[0])
}

// inspectReply decodes the reply of an inspect script (op): n fields, the
// first ints of them integers (v), the rest read from arr. A non-nil err,
// the script's run's, comes back as it is; so does an error for a reply of
// another shape.
func inspectReply(op string, n, ints int, res any, err error) (arr []any, v []int64, _ error) {
	if err != nil {
		return nil, nil, err
	}
	arr, ok := res.([]any)
	if !ok || len(arr) != n {
		return nil, nil, fmt.Errorf("%s: unexpected reply %T %v", op, res, res)
	}
	v, err = store.Int64s(op, arr[:ints], ints)
	return arr, v, err
}

// releaseArgs is release.lua's and sem_release.lua's ARGV. name is the
// lock's registry name (regName).
func releaseArgs(cfg Config, kd kind, name, token string) []any {
	return []any{
		token,                       // ARGV[1] token
		kd.member(token, name),      // ARGV[2] keep-alive registry member
		cfg.FenceTTL.Milliseconds(), // ARGV[3] fence retention, ms
	}
}

// renewArgs is renew.lua's and sem_renew.lua's ARGV, and the first five of
// rw_renew.lua's. A ttl of 0 renews for the lease's own TTL.
// extra more are room for the rest of rw_renew.lua's.
func renewArgs(cfg Config, kd kind, name, token string, ttl time.Duration, extra int) []any {
	return append(make([]any, 0, 5+extra),
		token,                       // ARGV[1] token
		ttl.Milliseconds(),          // ARGV[2] new lease TTL, ms (0: the lease's own)
		cfg.LostTTL.Milliseconds(),  // ARGV[3] lost-lease reasons' retention, ms
		kd.member(token, name),      // ARGV[4] keep-alive registry member
		cfg.FenceTTL.Milliseconds(), // ARGV[5] fence retention, ms
	)
}

// Statuses of force_release.lua's reply.
const (
	forceRemoved = 1 // a lease was removed
	forceFree    = 0 // the lock was free
)

// forceReleaseArgs is force_release.lua's and rw_force_release.lua's ARGV.
func forceReleaseArgs(cfg Config, name string) []any {
	return []any{
		cfg.FenceTTL.Milliseconds(), // ARGV[1] fence retention, ms
		cfg.LostTTL.Milliseconds(),  // ARGV[2] lost-lease reasons' retention, ms
		name,                        // ARGV[3] lock name
	}
}

// inspectArgs is the ARGV of every primitive's inspect script (inspect.lua,
// rw_inspect.lua, sem_inspect.lua). An empty token asks about no token.
func inspectArgs(kd kind, name, token string) []any {
	member := ""
	if token != "" {
		member = kd.member(token, name)
	}
	return []any{
		token,  // ARGV[1] token to report on, or ""
		member, // ARGV[2] the token's keep-alive registry member, or ""
	}
}

// leaveArgs is the ARGV of every primitive's leave script (leave.lua,
// rw_leave.lua, sem_leave.lua).
func leaveArgs(token string) []any {
	return []any{
		token, // ARGV[1] waiter token
	}
}
