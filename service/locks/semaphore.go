package locks

import (
	"context"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// MaxPermits is the largest capacity a semaphore may have.
const MaxPermits = 1_000_000

// SemaphoreRequest is what a client asks for when taking permits of a
// semaphore: Count of its Permits, as one lease. The embedded
// AcquireRequest's fields mean what they mean for a lock, except that a
// token never re-enters: a lease is one acquisition.
type SemaphoreRequest struct {
	AcquireRequest
	// Permits is the semaphore's capacity N. The first acquisition (or the
	// admin's SetSemaphorePermits) sets it; a request naming another N is
	// refused with a *PermitsMismatchError.
	Permits int64
	// Count is how many permits the lease takes: 1 ≤ Count ≤ Permits. Zero
	// means 1.
	Count int64
}

// SemaphoreLease is a granted (or renewed) semaphore lease.
type SemaphoreLease struct {
	Name      string
	Token     string
	Count     int64 // the permits the lease holds
	Permits   int64 // the semaphore's capacity when granted
	Available int64 // permits free right after the grant
	Fence     int64 // strictly increasing per name across grants
	TTL       time.Duration
	ExpiresAt time.Time  // computed from the Redis clock
	Keepalive *Keepalive // set when the service keeps the lease alive
}

// SemaphoreState is what inspection reveals about a semaphore. It never
// includes a token.
type SemaphoreState struct {
	Name    string
	Permits int64 // the capacity; 0 when no record is kept (nothing held or waited for long enough)
	InUse   int64 // permits held by leases that have not expired
	Holders int64 // leases that have not expired
	Waiters int64 // waiters whose wait has not ended, in every process
	Fair    bool  // fair while held or waited for
	Fence   int64 // the last fence issued (0 when none is known)

	// Owned says the token given to InspectSemaphore holds a lease; Lease
	// then describes it (without its token).
	Owned bool
	Lease *SemaphoreLease
	Owner string // the owned lease's owner text
	// LostReason says why the token given lost its lease (one of the Lost*
	// constants), when it holds none and that is known.
	LostReason string
}

// Available is the number of permits free: Permits less InUse, never
// negative (the admin may lower Permits below the permits in use).
func (s SemaphoreState) Available() int64 { return max(s.Permits-s.InUse, 0) }

// PermitsMismatchError reports an acquire naming a capacity other than the
// semaphore's. It wraps ErrConflict.
type PermitsMismatchError struct {
	Name    string
	Permits int64 // the semaphore's capacity
}

func (e *PermitsMismatchError) Error() string {
	return fmt.Sprintf("service: semaphore %s has %d permits", e.Name, e.Permits)
}

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *PermitsMismatchError) Unwrap() error { return store.ErrConflict }

// PermitsUnavailableError reports that too few permits of a semaphore are
// free (or, in fair mode, that earlier waiters go first). It wraps
// ErrConflict.
type PermitsUnavailableError struct {
	Name       string
	Available  int64         // permits free
	RetryAfter time.Duration // until the first lease expires, or a queue head's deadline
}

func (e *PermitsUnavailableError) Error() string {
	return fmt.Sprintf("service: semaphore %s has %d permits free", e.Name, e.Available)
}

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *PermitsUnavailableError) Unwrap() error { return store.ErrConflict }

// ErrTokenInUse reports an acquire whose token already holds a lease on the
// semaphore: a semaphore lease is not reentrant. It wraps ErrConflict.
var ErrTokenInUse = fmt.Errorf("%w: the token already holds a lease on this semaphore; a lease is one acquisition, acquire with another token", store.ErrConflict)

// semKeys names the keys of the semaphore called name (keysOf, kind
// "sem"). Its lock key is the capacity record (hash: p permits, f last
// fence, m fair), holders map a token to its lease's expiry and leases to
// its count, fence, TTL, keep-alive and owner; the fence key is not used:
// the capacity record keeps the fence.
func (s *Service) semKeys(ctx context.Context, name string) lockKeys {
	return s.keysIn(ctx, kindSem, name)
}

// SemaphoreKeys are the Redis keys of one semaphore, as the service names
// them: for whoever looks at its state in Redis from outside the service.
type SemaphoreKeys struct {
	Capacity, Holders, Leases, Waiters, Queue, Lost, Channel string
}

// SemaphoreKeysOf names the keys of the semaphore called name under the key prefix.
func SemaphoreKeysOf(prefix, name string) SemaphoreKeys {
	k := keysOf(prefix, kindSem, name)
	return SemaphoreKeys{Capacity: k.lock, Holders: k.holders, Leases: k.leases, Waiters: k.waiters,
		Queue: k.queue, Lost: k.lost, Channel: k.channel}
}

// semMember names a semaphore lease in the keep-alive registry.
func semMember(token, name string) string { return kindSem.member(token, name) }

// checkSemaphore validates a semaphore acquire and fills in its defaults.
// It reports whether the service generated the token.
func (s *Service) checkSemaphore(name string, req *SemaphoreRequest) (ownToken bool, err error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	if err := checkPermits(req.Permits); err != nil {
		return false, err
	}
	if req.Count == 0 {
		req.Count = 1
	}
	switch {
	case req.Count < 1:
		return false, invalid("count", "min", "count must be at least 1")
	case req.Count > req.Permits:
		return false, invalid("count", "max", "count must be at most permits (%d)", req.Permits)
	}
	ownToken = req.Token == ""
	if ownToken {
		req.Token = NewToken()
	} else if err := ValidateToken(req.Token); err != nil {
		return false, err
	}
	if req.TTL == 0 {
		req.TTL = s.cfg.DefaultTTL
	}
	if err := s.checkTTL("ttl", req.TTL); err != nil {
		return false, err
	}
	if err := ValidateOwner(req.Owner); err != nil {
		return false, err
	}
	switch {
	case req.Wait < 0:
		return false, invalid("wait", "min", "wait must not be negative")
	case req.Wait > s.cfg.MaxWait:
		return false, invalid("wait", "max", "wait must be at most %s", s.cfg.MaxWait)
	}
	return ownToken, s.checkKeepalive(&req.AcquireRequest)
}

// checkPermits checks a semaphore's capacity: 1 ≤ permits ≤ MaxPermits.
func checkPermits(permits int64) error {
	switch {
	case permits == 0:
		return invalid("permits", "required", "permits (the semaphore's capacity) is required")
	case permits < 1:
		return invalid("permits", "min", "permits must be at least 1")
	case permits > MaxPermits:
		return invalid("permits", "max", "permits must be at most %d", MaxPermits)
	}
	return nil
}
