package client

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
)

// Semaphore is a semaphore of the server: at most Permits permits are held
// at once, each lease holding the count it asked for. Its names are a
// namespace of their own, apart from locks and read/write locks. A lease
// is one acquisition with its own token, TTL and fence (strictly greater
// than every fence issued before for the name); it is not reentrant.
// Unlock gives its permits back, and the permits of a lease that expired or
// was lost are free again at once. A Semaphore is safe for concurrent use.
type Semaphore struct {
	c       *Client
	name    string
	permits atomic.Int64
}

// Semaphore returns the semaphore name of capacity permits. The first
// acquire sets the capacity on the server; every later one must name the
// same (an administrator can change it). It sends no request.
func (c *Client) Semaphore(name string, permits int64) *Semaphore {
	s := &Semaphore{c: c, name: name}
	s.permits.Store(permits)
	return s
}

func (s *Semaphore) target(count int64) target {
	return target{kind: kindSemaphore, name: s.name, permits: s.permits.Load(), count: max(count, 1)}
}

// Acquire takes count permits (at least 1) as one lease, waiting up to
// opts.Wait (zero: until ctx is done) until that many are free, woken by
// the server as soon as leases are released. It settles an acquire whose
// outcome is unknown as Client.Lock does, and keeps the lease alive with
// opts.KeepAlive as Client.Lock does.
//
// Returns a *HeldError (errors.Is(err, ErrHeld)) when too few permits are
// still free when the wait ends, a *PermitsMismatchError when the
// semaphore has another capacity, an *InvalidRequestError when count is
// above the capacity or an option is bad, ErrModeMismatch when opts.Fair
// differs from the semaphore's current mode, ErrUnavailable (wrapped) when
// the server could not answer, and the context's error when ctx ends
// first.
func (s *Semaphore) Acquire(ctx context.Context, count int64, opts LockOptions) (*Lease, error) {
	l, err := s.c.lock(ctx, s.target(count), NewToken(), opts)
	return l, s.withCapacity(ctx, err)
}

// TryAcquire takes count permits if that many are free, without waiting.
// Returns the errors of Acquire.
func (s *Semaphore) TryAcquire(ctx context.Context, count int64, opts LockOptions) (*Lease, error) {
	opts.Wait = -1
	return s.Acquire(ctx, count, opts)
}

// Hold takes count permits held for as long as the connection that asked
// for them stays open, as Client.Hold does for a lock: the server gives
// them back as soon as the connection closes. Returns the errors of
// Acquire.
func (s *Semaphore) Hold(ctx context.Context, count int64, opts HoldOptions) (*Lease, error) {
	l, err := s.c.hold(ctx, s.target(count), opts)
	return l, s.withCapacity(ctx, err)
}

// withCapacity fills in the capacity of a *PermitsMismatchError from the
// semaphore's state, when it can be read.
func (s *Semaphore) withCapacity(ctx context.Context, err error) error {
	var pm *PermitsMismatchError
	if errors.As(err, &pm) {
		if st, serr := s.Status(ctx); serr == nil {
			pm.Permits = st.Permits
		}
	}
	return err
}

// ForceRelease ends every lease of the semaphore (their holders see
// force_released) and wakes its waiters. It needs the admin credential as
// the client's API key, and is not retried after a request was sent, as
// Client.ForceRelease. Returns a *Problem with status 403 without the admin
// credential.
func (s *Semaphore) ForceRelease(ctx context.Context) error {
	return s.c.forceRelease(ctx, s.target(1))
}

// SetPermits changes the semaphore's capacity to permits and returns its
// state; this Semaphore asks with the new capacity from then on (other
// handles of the name get a *PermitsMismatchError until they do too).
// Leases already granted keep their permits: below the permits in use, new
// grants wait until enough leases end. It needs the admin credential as the
// client's API key. Returns a *Problem with status 403 without it, an
// *InvalidRequestError for a bad name or capacity, and ErrUnavailable
// (wrapped) when the server could not answer.
func (s *Semaphore) SetPermits(ctx context.Context, permits int64) (SemaphoreState, error) {
	req := request{method: http.MethodPut, path: s.target(1).path(), body: map[string]int64{"permits": permits}}
	resp, err := s.c.do(ctx, req, true) // idempotent: the same capacity again changes nothing
	if err != nil {
		return SemaphoreState{}, err
	}
	var st SemaphoreState
	if err := decode(req, resp, &st); err != nil {
		return SemaphoreState{}, err
	}
	s.permits.Store(permits)
	return st, nil
}

// SemaphoreState is what the server tells about a semaphore. It never holds
// a token.
type SemaphoreState struct {
	Name string `json:"name"`
	// Permits is the capacity; 0 when the server keeps none (never used, or
	// unused for long).
	Permits int64 `json:"permits"`
	// InUse is the permits held by leases that have not expired.
	InUse int64 `json:"in_use"`
	// Available is the permits free.
	Available int64 `json:"available"`
	// Holders is the number of leases.
	Holders int64 `json:"holders"`
	Waiters int64 `json:"waiters"`
	Fair    bool  `json:"fair"`
	// Fence is the last fence issued.
	Fence int64 `json:"fence"`
}

// Status returns the state of the semaphore. Returns an
// *InvalidRequestError for a bad name and ErrUnavailable (wrapped) when the
// server could not answer.
func (s *Semaphore) Status(ctx context.Context) (SemaphoreState, error) {
	var st SemaphoreState
	err := s.c.state(ctx, s.target(1), &st)
	return st, err
}
