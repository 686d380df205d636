package locks

// The semaphore: N permits of a name, taken k at a time as one lease per
// token. It is a primitive of the shared acquire machine (acquire.go) and
// of holds and keep-alive; what is its own is here: its types and errors,
// its acquire script's reading, its wake-ups shared out by permits
// (semWakes), its renew, release, force-release, capacity change and
// inspection, its metrics, and its scripts' ARGV and reply statuses (at
// the end of the file).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
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
	ExpiresAt time.Time     // computed from the Redis clock
	Keepalive *Keepalive    // set when the service keeps the lease alive
	Waited    time.Duration // as Lease.Waited
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

	// Leases are the leases held, soonest to expire first, at most
	// MaxListedLeases of them; LeasesTruncated says more are held.
	Leases          []HeldLease
	LeasesTruncated bool

	At time.Time // when the state was read (Redis clock)
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
	return fmt.Sprintf("locks: semaphore %s has %d permits", e.Name, e.Permits)
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
	return fmt.Sprintf("locks: semaphore %s has %d permits free", e.Name, e.Available)
}

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *PermitsUnavailableError) Unwrap() error { return store.ErrConflict }

// ErrTokenInUse reports an acquire whose token already holds a lease on the
// semaphore: a semaphore lease is not reentrant. It wraps ErrConflict.
var ErrTokenInUse = fmt.Errorf("%w: the token already holds a lease on this semaphore; a lease is one acquisition, acquire with another token", store.ErrConflict)

// semKeys names the keys of the semaphore called name (keysOf, kind
// "sem"). Its lock key is the capacity record (hash: p permits, f last
// fence, m fair), leases map a token to its lease's count, expiry, fence,
// TTL, keep-alive and owner, beside the permits in use and a bound on the
// earliest expiry (scripts/lua/lib/sem.lua). Neither the fence key nor the
// holders key is used: the capacity record keeps the fence, each lease's
// entry its expiry.
func (s *Service) semKeys(ctx context.Context, name string) lockKeys {
	return s.keysIn(ctx, kindSem, name)
}

// SemaphoreKeys are the Redis keys of one semaphore, as the service names
// them: for whoever looks at its state in Redis from outside the service.
type SemaphoreKeys struct {
	Capacity, Leases, Waiters, Queue, Lost, Channel string
}

// SemaphoreKeysOf names the keys of the semaphore called name under the key prefix.
func SemaphoreKeysOf(prefix, name string) SemaphoreKeys {
	k := keysOf(prefix, kindSem, name)
	return SemaphoreKeys{Capacity: k.lock, Leases: k.leases, Waiters: k.waiters,
		Queue: k.queue, Lost: k.lost, Channel: k.channel}
}

// semMember names a semaphore lease in the keep-alive registry.
func semMember(token, name string) string { return kindSem.member(token, name) }

// AcquireSemaphore takes req.Count of the req.Permits permits of semaphore
// name as one lease under req.Token (generated when empty). With req.Wait it
// waits up to that long for enough permits, as a lock waiter does (see
// acquireWaiting); a release wakes the waiters whose counts fit in the
// permits it freed (see semWakes). In fair mode waiters are served in
// arrival order, and a waiter wanting more permits than are free holds back
// those behind it. Returns a *ValidationError (ErrInvalid) for bad input, a
// *PermitsMismatchError when the semaphore has another capacity, a
// *PermitsUnavailableError when too few permits are free (after the wait), a
// *ModeError when req.Fair differs from the semaphore's mode, ErrTokenInUse
// when the token already holds a lease on it, a *store.QuotaError when the
// tenant is at a quota (as Acquire), ctx's error when ctx ends first, or an
// error wrapping ErrUnavailable. On ctx's error or ErrUnavailable a lease
// the script granted anyway under a token the service generated is given
// back, best effort.
func (s *Service) AcquireSemaphore(ctx context.Context, name string, req SemaphoreRequest) (SemaphoreLease, error) {
	if err := ValidateName(name); err != nil {
		return SemaphoreLease{}, err
	}
	if err := checkPermits(req.Permits); err != nil {
		return SemaphoreLease{}, err
	}
	if req.Count == 0 {
		req.Count = 1
	}
	switch {
	case req.Count < 1:
		return SemaphoreLease{}, invalid("count", "min", "count must be at least 1")
	case req.Count > req.Permits:
		return SemaphoreLease{}, invalid("count", "max", "count must be at most permits (%d)", req.Permits)
	}
	p := s.semaphore()
	p.permits, p.count = req.Permits, req.Count
	lease, r, err := s.acquire(ctx, p, name, req.AcquireRequest)
	if err != nil {
		return SemaphoreLease{}, err
	}
	return SemaphoreLease{Name: name, Token: lease.Token, Count: req.Count, Permits: r.permits,
		Available: max(r.available, 0), Fence: lease.Fence, TTL: lease.TTL,
		ExpiresAt: lease.ExpiresAt, Keepalive: lease.Keepalive, Waited: lease.Waited}, nil
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

// semaphore is the semaphore as a primitive (see primitive.go). An acquire's
// primitive carries the capacity and the count it asks for; the renewer's
// and a hold's need neither.
type semaphore struct {
	leaseBase
	permits, count int64
}

func (semaphore) kind() kind { return kindSem }

// listen: one release may let several waiters in; it wakes the waiters of
// this process whose counts fit in the permits it freed (semWakes). A
// grant's notice of a lease that ends after the wait does not reach the
// waiter: it could not bring its re-check forward.
func (p semaphore) listen(k lockKeys, req AcquireRequest) (wakeups, error) {
	// the wait began a moment ago: its end is a moment before this
	sw, err := p.s.semWakes.join(k.channel, p.count, req.Fair, time.Now().Add(req.Wait))
	if err != nil {
		return nil, err
	}
	return sw, nil
}

// acquireCall is sem_acquire.lua on the semaphore's keys, for its count of
// its permits.
func (p semaphore) acquireCall(a acquisition, waiterTimeout time.Duration) (*store.Script, []string, []any) {
	s, k := p.s, a.k
	req := SemaphoreRequest{AcquireRequest: a.req, Permits: p.permits, Count: p.count}
	return semScripts.acquire, []string{k.lock, k.leases, k.waiters, k.queue, s.registryKey(k), k.lost, k.channel},
		semAcquireArgs(s.cfg, req, k.regName(), waiterTimeout, a.ownToken && !a.tried)
}

// readAttempt reads sem_acquire.lua's reply into the shared machine's
// statuses: a lease holds its count of permits as its holds.
func (p semaphore) readAttempt(a acquisition, res any) (attemptResult, error) {
	k := a.k
	v, err := store.Int64s("sem_acquire", res, 10)
	if err != nil {
		return attemptResult{}, err
	}
	r := attemptResult{status: acquireNotGranted, holdCount: p.count, fence: v[1],
		ttl: time.Duration(v[2]) * time.Millisecond, nowMS: v[3],
		recheck: time.Duration(v[4]) * time.Millisecond, fair: truth(v[5]),
		keepalive: keepaliveOf(v[6], v[7], v[3]), permits: v[8], available: v[9]}
	switch v[0] {
	case semGranted:
		r.status = acquireGranted
	case semNotGranted:
	case semModeMismatch:
		r.status = acquireModeMismatch
	case semPermitsMismatch:
		r.status, r.refused = acquireRefused, &PermitsMismatchError{Name: k.name, Permits: r.permits}
	case semTokenHoldsALease:
		r.status, r.refused = acquireRefused, ErrTokenInUse
	default:
		r.status, r.refused = acquireRefused, fmt.Errorf("sem_acquire: unknown status %d", v[0])
	}
	return r, nil
}

// refusal: too few permits are free (*PermitsUnavailableError, Retry-After
// the re-check time), the mode differs (*ModeError), the capacity differs
// or the token holds a lease (r.refused).
func (p semaphore) refusal(name string, r attemptResult) error {
	conflicts := p.s.semMetrics.conflicts
	switch {
	case r.status == acquireModeMismatch:
		conflicts.WithLabelValues("mode").Inc()
		return &ModeError{Name: name, Fair: r.fair}
	case errors.As(r.refused, new(*PermitsMismatchError)):
		conflicts.WithLabelValues("permits").Inc()
		return r.refused
	case errors.Is(r.refused, ErrTokenInUse):
		conflicts.WithLabelValues("token").Inc()
		return r.refused
	case r.refused != nil:
		return r.refused
	}
	conflicts.WithLabelValues("unavailable").Inc()
	return &PermitsUnavailableError{Name: name, Available: max(r.available, 0), RetryAfter: r.recheck}
}

func (p semaphore) countGrant(bool) { p.s.semMetrics.grants.Inc() }

func (p semaphore) countWait(err error) { p.s.semMetrics.waits.WithLabelValues(waitOutcome(err)).Inc() }

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
	return append(keys, k.leases, k.lost)
}

// semLease is a semaphore lease as the shared machinery carries it: its
// HoldCount is the permits it holds.
func semLease(l SemaphoreLease) Lease {
	return Lease{Name: l.Name, Token: l.Token, Fence: l.Fence, HoldCount: l.Count, TTL: l.TTL,
		ExpiresAt: l.ExpiresAt, Keepalive: l.Keepalive}
}

// RenewSemaphore extends the lease on semaphore name owned by token to ttl
// (zero: the lease's own TTL). A keep-alive lease is renewed at most to its
// max-hold deadline and the renewal counts as its heartbeat, as Renew does
// for a lock. Returns ErrNotFound when the token holds no lease (expired,
// released or force-released), a *ValidationError for bad input, or an
// error wrapping ErrUnavailable.
func (s *Service) RenewSemaphore(ctx context.Context, name, token string, ttl time.Duration) (SemaphoreLease, error) {
	if err := s.checkRenew(name, token, ttl); err != nil {
		return SemaphoreLease{}, err
	}
	k := s.semKeys(ctx, name)
	lease, err := s.renewSemaphore(ctx, k, token, ttl)
	s.renewed(ctx, k, token, ttl, semLease(lease), err)
	return lease, err
}

// renewSemaphore is RenewSemaphore on validated input.
func (s *Service) renewSemaphore(ctx context.Context, k lockKeys, token string, ttl time.Duration) (SemaphoreLease, error) {
	res, err := s.st.RunReplicated(ctx, semScripts.renew,
		[]string{k.lock, k.leases, s.registryKey(k), k.lost, k.channel},
		renewArgs(s.cfg, kindSem, k.regName(), token, ttl, 0)...)
	v, err := ownerReply("sem_renew", 7, res, err)
	if err != nil {
		return SemaphoreLease{}, err
	}
	return SemaphoreLease{Name: k.name, Token: token, Count: v[1], Fence: v[2],
		TTL:       time.Duration(v[3]) * time.Millisecond,
		ExpiresAt: time.UnixMilli(v[4] + v[3]).UTC(),
		Keepalive: keepaliveOf(v[5], v[6], v[4])}, nil
}

// ReleaseSemaphore gives back the permits of the lease on semaphore name
// owned by token and wakes the waiters. It returns the permits given back.
// Returns ErrNotFound, a *ValidationError or an error wrapping
// ErrUnavailable.
func (s *Service) ReleaseSemaphore(ctx context.Context, name, token string) (int64, error) {
	if err := checkNameToken(name, token); err != nil {
		return 0, err
	}
	return s.releaseSemaphore(ctx, s.semKeys(ctx, name), token)
}

// releaseSemaphore is ReleaseSemaphore on validated input.
func (s *Service) releaseSemaphore(ctx context.Context, k lockKeys, token string) (int64, error) {
	res, err := s.st.RunReplicated(ctx, semScripts.release,
		[]string{k.lock, k.leases, s.registryKey(k), k.lost, k.channel},
		releaseArgs(s.cfg, kindSem, k.regName(), token)...)
	v, err := ownerReply("sem_release", 2, res, err)
	if err != nil {
		return 0, err
	}
	s.semMetrics.releases.WithLabelValues("released").Inc()
	s.released(ctx, k, token, 0)
	return v[1], nil
}

// ForceReleaseSemaphore removes every lease of semaphore name, bumps its
// fence so the evicted leases' fences are stale, records each evicted
// token's loss (force_released) and wakes the waiters. It returns how many
// leases were removed. Returns a *ValidationError or an error wrapping
// ErrUnavailable.
func (s *Service) ForceReleaseSemaphore(ctx context.Context, name string) (int64, error) {
	if err := ValidateName(name); err != nil {
		return 0, err
	}
	k := s.semKeys(ctx, name)
	res, err := s.st.RunReplicated(ctx, semScripts.forceRelease,
		[]string{k.lock, k.leases, s.registryKey(k), k.lost, k.channel},
		semForceReleaseArgs(s.cfg, k.regName())...)
	if err != nil {
		return 0, err
	}
	n, ok := res.(int64)
	if !ok {
		return 0, fmt.Errorf("sem_force_release: unexpected reply %T %v", res, res)
	}
	s.semMetrics.releases.WithLabelValues("forced").Add(float64(n))
	if n > 0 {
		s.evictPlaces(ctx, k)
	}
	return n, nil
}

// SetSemaphorePermits changes the capacity of semaphore name to permits
// (creating its record when none is kept) and wakes its waiters. Leases
// already granted keep their permits. It returns the state after the
// change. Returns a *ValidationError or an error wrapping ErrUnavailable.
func (s *Service) SetSemaphorePermits(ctx context.Context, name string, permits int64) (SemaphoreState, error) {
	if err := ValidateName(name); err != nil {
		return SemaphoreState{}, err
	}
	if err := checkPermits(permits); err != nil {
		return SemaphoreState{}, err
	}
	k := s.semKeys(ctx, name)
	if _, err := s.st.RunReplicated(ctx, semSetPermitsScript, []string{k.lock, k.leases, k.channel},
		semSetPermitsArgs(s.cfg, permits)...); err != nil {
		return SemaphoreState{}, err
	}
	return s.InspectSemaphore(ctx, name, "")
}

// InspectSemaphore reads the state of semaphore name; with a token it also
// reports the lease that token holds, or why it lost it. Returns a
// *ValidationError or an error wrapping ErrUnavailable.
func (s *Service) InspectSemaphore(ctx context.Context, name, token string) (SemaphoreState, error) {
	if err := checkNameOptionalToken(name, token); err != nil {
		return SemaphoreState{}, err
	}
	return s.inspectSemaphore(ctx, s.semKeys(ctx, name), token, MaxListedLeases)
}

// inspectSemaphore is InspectSemaphore of k with up to most leases in the
// state's Leases.
func (s *Service) inspectSemaphore(ctx context.Context, k lockKeys, token string, most int) (SemaphoreState, error) {
	name := k.name
	res, err := s.st.Run(ctx, semScripts.inspect,
		[]string{k.lock, k.leases, k.waiters, k.lost, s.registryKey(k)},
		heldInspectArgs(kindSem, k.regName(), token, most)...)
	arr, v, err := inspectReply("sem_inspect", 18, 14, res, err)
	if err != nil {
		return SemaphoreState{}, err
	}
	st := SemaphoreState{Name: name, Permits: v[0], InUse: v[1], Holders: v[2], Waiters: v[3],
		Fair: truth(v[4]), Fence: v[5], Owned: truth(v[7]), At: time.UnixMilli(v[6]).UTC()}
	if st.Leases, st.LeasesTruncated, err = heldLeases(kindSem, arr[16], arr[17], v[6]); err != nil {
		return SemaphoreState{}, err
	}
	st.LostReason, _ = arr[14].(string)
	if st.Owned {
		st.Owner, _ = arr[15].(string)
		st.Lease = &SemaphoreLease{Name: name, Count: v[8], Permits: v[0], Fence: v[9],
			TTL:       time.Duration(v[10]) * time.Millisecond,
			ExpiresAt: time.UnixMilli(v[6] + v[10]).UTC(),
			Keepalive: keepaliveOf(v[11], v[12], v[13])}
	}
	return st, nil
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

// semMetrics are the semaphore's Prometheus collectors. Every label has a
// fixed set of values.
type semMetrics struct {
	grants    prometheus.Counter
	conflicts *prometheus.CounterVec // reason: unavailable, mode, permits, token
	releases  *prometheus.CounterVec // kind: released, forced
	waits     *prometheus.CounterVec // outcome: acquired, timeout, canceled, conflict, error
}

func newSemMetrics(reg prometheus.Registerer) *semMetrics {
	m := &semMetrics{
		grants: counter(reg, "latchkey_semaphore_grants_total", "Semaphore leases granted."),
		conflicts: counterVec(reg, "latchkey_semaphore_conflicts_total",
			"Semaphore acquire attempts refused, by reason (unavailable, mode, permits, token).", "reason"),
		releases: counterVec(reg, "latchkey_semaphore_releases_total",
			"Semaphore leases ended by release, by kind (released, forced).", "kind"),
		waits: counterVec(reg, "latchkey_semaphore_waits_total",
			"Semaphore acquires that waited, by outcome (acquired, timeout, canceled, conflict, error).", "outcome"),
	}
	for _, r := range []string{"unavailable", "mode", "permits", "token"} {
		m.conflicts.WithLabelValues(r)
	}
	return m
}

// semWakes shares out a semaphore's wake-ups among the waiters of this
// process. A message that says how many permits are free ("released:2"
// after a release; a grant's notice, "acquired:<fence>:<ttl_ms>:1", says
// how many it left) wakes, in arrival order, the waiters whose counts fit
// in that many (as Redisson's semaphore wakes as many waiters as permits
// were released); a grant's notice reaches the others as a notice, which
// tells them when that lease ends (an expiry publishes nothing) without
// sending them to Redis; any other hint (a force-release, a change of
// permits, a waiter that left, a re-subscription) wakes them all, and so
// does every hint in fair mode, and every notice that leaves permits free:
// only the queue's head may take permits, and this process cannot tell which
// of its waiters that is. So a release does not send every waiter
// of the process to Redis, while a waiter that fits is never passed over
// for one that does not. Each semaphore with waiters here has one broadcast
// listener on the shared subscriber.
type semWakes struct {
	sub    *subscriber
	mu     sync.Mutex
	groups map[string]*semGroup // by channel
}

// semGroup is the waiters of one semaphore in this process, in arrival order.
type semGroup struct {
	l       *listener
	done    chan struct{} // closed when the last waiter left
	waiters []*semWaiter
}

// semWaiter is one waiter: c (buffered 1) receives its wake-ups, the hint
// that woke it. It is the waiter's wakeups (primitive.go).
type semWaiter struct {
	w       *semWakes
	channel string
	count   int64
	fair    bool
	// until is no earlier than the end of the wait (zero: not known); a
	// notice of a lease that ends then or later is not passed on
	until time.Time
	c     chan string
	ready <-chan struct{}
}

func (sw *semWaiter) C() <-chan string { return sw.c }

func (sw *semWaiter) Ready() <-chan struct{} { return sw.ready }

// leave removes the waiter (see semWakes.leave); a wake-up it did not use
// is not passed on: a release wakes every waiter it may let in.
func (sw *semWaiter) leave(bool) { sw.w.leave(sw.channel, sw) }

// join registers a waiter for count permits on channel, whose wait ends
// by until (zero: not known). Returns the subscriber's error when it is
// closed.
func (w *semWakes) join(channel string, count int64, fair bool, until time.Time) (*semWaiter, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.groups[channel]
	if g == nil {
		l, err := w.sub.join(channel, true)
		if err != nil {
			return nil, err
		}
		g = &semGroup{l: l, done: make(chan struct{})}
		if w.groups == nil {
			w.groups = map[string]*semGroup{}
		}
		w.groups[channel] = g
		go w.dispatch(g)
	}
	sw := &semWaiter{w: w, channel: channel, count: count, fair: fair, until: until, c: make(chan string, 1), ready: g.l.Ready()}
	g.waiters = append(g.waiters, sw)
	return sw, nil
}

// leave removes a waiter; the last one of a semaphore leaves the subscriber.
func (w *semWakes) leave(channel string, sw *semWaiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.groups[channel]
	if g == nil {
		return
	}
	g.waiters = slices.DeleteFunc(g.waiters, func(x *semWaiter) bool { return x == sw })
	if len(g.waiters) == 0 {
		delete(w.groups, channel)
		g.l.leave(false)
		close(g.done)
	}
}

// dispatch shares out the hints and notices of g's listener until g is
// left.
func (w *semWakes) dispatch(g *semGroup) {
	for {
		var msg string
		select {
		case <-g.done:
			return
		case msg = <-g.l.C():
		}
		budget, counted := permitsIn(msg)
		n, notice := parseAcquired(msg)
		// a notice moves a waiter's re-check to the lease's end, never
		// past the end of its wait (pause): not one whose wait ends first
		ends := time.Now().Add(n.ttl)
		w.mu.Lock()
		for _, sw := range g.waiters {
			wake := true
			switch {
			case sw.fair: // only the queue's head may take them, wherever it waits
				wake = !notice || budget > 0
			case counted && sw.count > budget:
				wake = false
			default:
				budget -= sw.count
			}
			switch {
			case wake && notice:
				offer(sw.c, hintGranted) // permits it fits are free: a hint to try
			case wake, notice && (sw.until.IsZero() || ends.Before(sw.until)):
				offer(sw.c, msg)
			}
		}
		w.mu.Unlock()
	}
}

// permitsIn reads the permits a "released:n" hint frees, or a grant's
// notice leaves free.
func permitsIn(msg string) (int64, bool) {
	if n, ok := parseAcquired(msg); ok {
		return n.available, n.available >= 0
	}
	_, n, ok := strings.Cut(msg, ":")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(n, 10, 64)
	return v, err == nil
}

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
// caller as a waiter for that long when it is not granted; fresh says the
// service made the token for this acquire and no attempt under it has run,
// so it is neither a waiter nor lost. Its release, renew, inspect and leave
// scripts take the exclusive lock's ARGV (scripts.go).
func semAcquireArgs(cfg Config, req SemaphoreRequest, name string, waiterTimeout time.Duration, fresh bool) []any {
	return append(acquireHead(make([]any, 0, 14), cfg, kindSem, req.AcquireRequest, name, waiterTimeout),
		req.Owner,   // ARGV[11] owner text, "" for none
		req.Permits, // ARGV[12] permits N
		req.Count,   // ARGV[13] count k
		flag(fresh), // ARGV[14] "1": no waiter registration or lost reason of the token to clear
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
