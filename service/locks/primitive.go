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
//     fields of attemptResult;
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
	// broadcast says whether a waiter of req hears every wake-up: true
	// when one release may let several waiters in, or their order matters
	// (fair mode); otherwise a wake-up goes to one waiter of the process.
	broadcast(req AcquireRequest) bool
	// attempt runs the acquire script once. waiterTimeout > 0 registers the
	// caller as a waiter for that long when it is not granted; keepTTL
	// makes a re-entry keep the lease's own TTL (the request gave none).
	attempt(ctx context.Context, k lockKeys, req AcquireRequest, waiterTimeout time.Duration, keepTTL bool) (attemptResult, error)
	// release drops one hold of token's lease. Returns ErrNotFound,
	// ErrNotOwner or an error wrapping ErrUnavailable.
	release(ctx context.Context, k lockKeys, token string) (Released, error)
	// renew extends token's lease to ttl (zero: its own TTL), as Renew.
	renew(ctx context.Context, k lockKeys, token string, ttl time.Duration) (Lease, error)
	// lostReason is why token lost its lease, as recorded, or "".
	lostReason(ctx context.Context, k lockKeys, token string) string
	// leave removes a waiter that gives up from the waiters and the queue.
	leave(ctx context.Context, k lockKeys, token string) error
	// batchScript renews a batch of the primitive's keep-alive leases.
	batchScript() *store.Script
	// batchKeys appends the keys batchScript takes for one entry.
	batchKeys(keys []string, k lockKeys) []string
}

// leaseBase is what every primitive is built on, embedded in each: its
// service and its scripts, which give it the primitive methods that only
// name a script (a primitive with other needs defines its own).
type leaseBase struct {
	s  *Service
	ls *leaseScripts
}

func (b leaseBase) batchScript() *store.Script { return b.ls.renewBatch }

// leave runs the leave script on the waiters, the queue and the channel.
func (b leaseBase) leave(ctx context.Context, k lockKeys, token string) error {
	_, err := b.s.st.Run(ctx, b.ls.leave, []string{k.waiters, k.queue, k.channel}, leaveArgs(token)...)
	return err
}

// primitives are the lock primitives by kind, for the renewer.
func (s *Service) primitive(k kind) (primitive, bool) {
	switch k {
	case kindMutex:
		return s.mutex, true
	case kindSem:
		return s.semaphore(), true
	case kindRW:
		return s.rwlock, true
	}
	return nil, false
}
