package locks

import (
	"context"
	"errors"
	"time"
)

// semaphore is the semaphore as a primitive (see primitive.go): what the
// keep-alive renewer and connection-held leases (Hold) need of it. Its
// acquisitions wait through semWaiting rather than acquireWaiting: their
// wake-ups are shared out by permits (semWakes) and their refusals are
// semaphore errors, so attempt is not used.
type semaphore struct{ leaseBase }

func (semaphore) kind() kind { return kindSem }

// broadcast: one release may let several waiters in.
func (semaphore) broadcast(AcquireRequest) bool { return true }

// errSemaphoreAttempt is what attempt answers: a semaphore's acquisitions go
// through AcquireSemaphore, which knows their permits and count.
var errSemaphoreAttempt = errors.New("service: a semaphore is acquired through AcquireSemaphore")

func (semaphore) attempt(context.Context, lockKeys, AcquireRequest, time.Duration, bool) (attemptResult, error) {
	return attemptResult{}, errSemaphoreAttempt
}

// release gives back token's lease; a semaphore lease has one hold.
func (p semaphore) release(ctx context.Context, k lockKeys, token string) (Released, error) {
	if _, err := p.s.releaseSemaphore(ctx, k, token); err != nil {
		return Released{}, err
	}
	return Released{Released: true}, nil
}

// renew renews token's lease as a Lease (see semLease).
func (p semaphore) renew(ctx context.Context, k lockKeys, token string, ttl time.Duration) (Lease, error) {
	l, err := p.s.renewSemaphore(ctx, k, token, ttl)
	return semLease(l), err
}

func (p semaphore) lostReason(ctx context.Context, k lockKeys, token string) string {
	st, _ := p.s.InspectSemaphore(ctx, k.name, token) // a failed inspect has no reason
	return st.LostReason
}

func (semaphore) batchKeys(keys []string, k lockKeys) []string {
	return append(keys, k.holders, k.leases, k.lost)
}

// semLease is a semaphore lease as the shared machinery carries it: its
// HoldCount is the permits it holds.
func semLease(l SemaphoreLease) Lease {
	return Lease{Name: l.Name, Token: l.Token, Fence: l.Fence, HoldCount: l.Count, TTL: l.TTL,
		ExpiresAt: l.ExpiresAt, Keepalive: l.Keepalive}
}

// HoldSemaphore takes permits of semaphore name as AcquireSemaphore does
// (waiting up to req.Wait) and keeps the lease alive until Close or until
// it is lost, as Hold does for a lock. The Hold's lease and renewals carry
// the permits held as their HoldCount. Returns the errors of
// AcquireSemaphore.
func (s *Service) HoldSemaphore(ctx context.Context, name string, req SemaphoreRequest) (*Hold, error) {
	return s.hold(ctx, s.semaphore(), name, req.AcquireRequest, func(ctx context.Context, name string, ar AcquireRequest) (Lease, error) {
		req.AcquireRequest = ar
		l, err := s.AcquireSemaphore(ctx, name, req)
		return semLease(l), err
	})
}
