package locks

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// primitive is what the machinery every lock primitive shares — waiting
// (acquireWaiting), handing out and giving back a grant (handOut, giveBack),
// connection-held leases (Hold), keep-alive renewals (the renewer) and the
// wake-up hints of releases and force-releases — needs of one primitive.
// Each primitive implements it once with its own scripts, on the keys that
// keysOf names for its kind; its methods take already validated input.
//
// The shared machinery relies on these rules of a primitive's scripts:
//   - acquire registers a caller that may wait in the waiters zset (and the
//     fair queue) with a deadline from the Redis clock, and replies with the
//     fields of attemptResult; every grant, new or a re-entry, publishes
//     its notice "acquired:<fence>:<ttl_ms>" on the channel (a semaphore's
//     adds ":<available>", see parseAcquired);
//   - release and force-release publish "released" and "forced" on the
//     channel; a renewal that ends a lease sooner publishes "shortened";
//     leave publishes "left" when a waiter behind the one leaving may now go
//     (see subscriber.go);
//   - a keep-alive lease has a registry member kind.member(token, name),
//     due when its next renewal is, removed when the lease ends, and the
//     name's lost hash maps a token to why it lost its lease;
//   - the batch renewal script takes the registry as KEYS[1], then the keys
//     batchKeys appends per entry, ARGV[1] the lost reasons' retention and
//     ARGV[1+i] the member of entry i, and replies as renew_batch.lua does.
type primitive interface {
	// kind names the primitive's keys and registry members.
	kind() kind
	// listen joins the wake-ups of a waiter of req on k's channel. Who a
	// wake-up reaches is the primitive's: every waiter of the process when
	// one release may let several in or their order matters (fair mode),
	// else one waiter (see subscriber.join), or those a semaphore's freed
	// permits fit (see semWakes); a grant's notice, which sends no waiter
	// to Redis, reaches every one. Returns an error only after Close.
	listen(k lockKeys, req AcquireRequest) (wakeups, error)
	// acquireCall names the primitive's acquire script for a, its keys and
	// its ARGV, which the machine runs (runAttempt). waiterTimeout > 0
	// registers the caller as a waiter for that long when it is not
	// granted; a.keepTTL makes a re-entry keep the lease's own TTL (the
	// request gave none).
	acquireCall(a acquisition, waiterTimeout time.Duration) (script *store.Script, keys []string, args []any)
	// readAttempt reads the acquire script's reply res for a into the
	// shared statuses. Returns an error for a reply of another shape.
	readAttempt(a acquisition, res any) (attemptResult, error)
	// refusal is the error of an attempt on name that was not granted,
	// counted in the primitive's metrics.
	refusal(name string, r attemptResult) error
	// countGrant counts a grant, new or reentrant, in the primitive's metrics.
	countGrant(reentrant bool)
	// countWait counts the outcome of a wait in the primitive's metrics.
	countWait(err error)
	// release drops one hold of token's lease. Returns ErrNotFound,
	// ErrNotOwner or an error wrapping ErrUnavailable.
	release(ctx context.Context, k lockKeys, token string) (Released, error)
	// renew extends token's lease to ttl (zero: its own TTL), as Renew.
	renew(ctx context.Context, k lockKeys, token string, ttl time.Duration) (Lease, error)
	// lostReason is why token lost its lease, as recorded, or "".
	lostReason(ctx context.Context, k lockKeys, token string) string
	// leave removes a waiter that gives up from the waiters and the queue.
	leave(ctx context.Context, k lockKeys, token string) error
	// batchKeys appends the keys the primitive's batch renewal script
	// (leaseScripts.renewBatch) takes for one entry.
	batchKeys(keys []string, k lockKeys) []string
}

// wakeups is what a waiter hears wake-ups on: a listener of the
// subscriber, or a primitive's own share of one.
type wakeups interface {
	// C delivers hints to try again, and grants' notices (see
	// parseAcquired), which are none.
	C() <-chan string
	// Ready is closed once Redis confirmed the channel's subscription.
	Ready() <-chan struct{}
	// leave stops listening; handOn passes on a wake-up the waiter did not
	// use (see listener.leave).
	leave(handOn bool)
}

// leaseBase is what every primitive is built on, embedded in each: its
// service and its scripts, which give it the primitive method that only
// names a script (leave), and a lock's refusals and counts (a primitive
// with other needs defines its own).
type leaseBase struct {
	s  *Service
	ls *leaseScripts
}

// leave runs the leave script on the waiters, the queue and the channel.
func (b leaseBase) leave(ctx context.Context, k lockKeys, token string) error {
	_, err := b.s.st.Run(ctx, b.ls.leave, []string{k.waiters, k.queue, k.channel}, leaveArgs(token)...)
	return err
}

// join listens on k's channel; broadcast: every waiter of the process hears
// every wake-up, else one waiter hears each.
func (b leaseBase) join(k lockKeys, broadcast bool) (wakeups, error) {
	l, err := b.s.sub.join(k.channel, broadcast)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// refusal: another token holds the lock (*HeldError, Retry-After its
// remaining TTL), its mode differs (*ModeError), or a rule of the
// primitive refused (r.refused).
func (b leaseBase) refusal(name string, r attemptResult) error {
	b.s.metrics.conflicts.Inc()
	switch r.status {
	case acquireModeMismatch:
		return &ModeError{Name: name, Fair: r.fair}
	case acquireRefused:
		return r.refused
	}
	retry := r.ttl
	if retry <= 0 {
		retry = r.recheck
	}
	return &HeldError{Name: name, RetryAfter: retry}
}

func (b leaseBase) countGrant(reentrant bool) {
	if reentrant {
		b.s.metrics.grants.WithLabelValues("reentrant").Inc()
	} else {
		b.s.metrics.grants.WithLabelValues("new").Inc()
	}
}

func (b leaseBase) countWait(err error) { b.s.metrics.waits.WithLabelValues(waitOutcome(err)).Inc() }

// renewed follows a renewal of token's lease on k, of any primitive, that
// asked for ttl asked (0: the lease's own) and answered lease and err: a
// new TTL may bring the next keep-alive renewal forward, so k's registry
// shard is marked (markShard, a no-op on a single node), and the lease's
// place in its tenant's quota now ends when the renewed lease does.
func (s *Service) renewed(ctx context.Context, k lockKeys, token string, asked time.Duration, lease Lease, err error) {
	if asked != 0 {
		s.markShard(ctx, k, lease.Keepalive, lease.TTL, lease.ExpiresAt)
	}
	if err == nil {
		s.setPlace(ctx, k, token, leaseLasts(lease))
	}
}
