package locks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// The acquire machine every primitive shares: the request checked and
// completed (checkAcquire, check.go), one attempt with the lease's place in
// its tenant's quota (attempt, see quota.go) that runs the primitive's
// acquire script (runAttempt), or a wait woken by pub/sub (acquireWaiting),
// then the grant handed out (handOut) or, when the answer is lost, given
// back (giveBack). A primitive supplies what differs (primitive.go): its
// acquire script with its keys and ARGV and how its reply reads, who a
// wake-up reaches, and its refusals and counts.

// AcquireRequest is what a client asks for when taking a lease.
type AcquireRequest struct {
	// Token owns the lease. Empty means the service generates one; a token
	// that already owns the lock makes the acquire reentrant.
	Token string
	// TTL is the lease time. Zero means Config.DefaultTTL.
	TTL time.Duration
	// Wait is how long to wait for the lock when another token holds it;
	// zero tries once. At most Config.MaxWait.
	Wait time.Duration
	// Fair asks for FIFO order among the lock's waiters. A lock is fair or
	// not for as long as anyone holds or waits for it.
	Fair bool

	// Keepalive has the service renew the lease every TTL/3 (see keepalive.go).
	Keepalive bool
	// MaxHold bounds a keep-alive lease's life. Zero means Config.DefaultMaxHold.
	MaxHold time.Duration
	// Heartbeat, when non-zero, stops renewals once the holder has not called
	// Renew within this interval.
	Heartbeat time.Duration

	// Owner is free text naming the holder (see ValidateOwner), shown by
	// Inspect to anyone. Empty means none. A re-entry keeps the owner the
	// lease was first granted with.
	Owner string

	// Mode is the lease asked of a read/write lock (AcquireRW); other
	// primitives take none.
	Mode RWMode
	// Value is the value an election's leader leads with (Campaign); other
	// primitives take none.
	Value string
}

// Lease is a granted lock lease.
type Lease struct {
	Name      string
	Token     string
	Fence     int64 // strictly increasing per name across new grants
	HoldCount int64
	TTL       time.Duration
	ExpiresAt time.Time  // computed from the Redis clock
	Reentrant bool       // true when an existing lease was re-entered
	Keepalive *Keepalive // set when the service keeps the lease alive
	Mode      RWMode     // a read/write lock's lease: read or write; else empty
	Value     string     // an election's leadership: the leader's value; else empty
	Owner     string     // an election's leadership: the owner text it was granted with; else empty
	// Waited is how long the acquire had waited when it made the attempt
	// that granted the lease; 0 when its first attempt did. The lease's TTL
	// runs from that attempt, so a caller's lower bound of its end is its
	// request's send time plus Waited plus the TTL.
	Waited time.Duration
}

// acquisition is one acquire on its way through the machine: the primitive
// and keys it is for, the request as completed by acquire, and what
// completing it decided.
type acquisition struct {
	p   primitive
	k   lockKeys
	req AcquireRequest
	// keepTTL: the request gave no TTL, so a re-entry keeps the lease's own.
	keepTTL bool
	// ownToken: the service generated the token, so a grant nobody will
	// learn of is released (see handOut and giveBack).
	ownToken bool
	// tried: an attempt of this acquire has run, and may have registered
	// its token as a waiter.
	tried bool
}

// attemptResult is the decoded reply of a primitive's acquire script.
type attemptResult struct {
	status    int64 // acquireGranted, acquireReentered, acquireNotGranted, acquireModeMismatch or acquireRefused
	holdCount int64 // the lease's holds (a semaphore's: its permits)
	fence     int64
	ttl       time.Duration // the lease's TTL, or the holder's remaining TTL
	nowMS     int64
	recheck   time.Duration // when not granted: retry by then without a wake-up
	fair      bool          // the lock's mode
	keepalive *Keepalive    // a granted keep-alive lease's bounds
	mode      RWMode        // the lease's mode (read/write lock)
	refused   error         // a primitive's own refusal (ErrConflict), when status is acquireRefused
	permits   int64         // a semaphore's capacity
	available int64         // a semaphore's permits free after the attempt
	leader    *Leader       // an election's leader: the caller's when granted, else the other's (nil: vacant)
}

// granted reports a grant, new or reentrant.
func (r attemptResult) granted() bool {
	return r.status == acquireGranted || r.status == acquireReentered
}

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

// lockAttempt reads the reply of acquire.lua, and of rw_acquire.lua whose
// reply is its (op names the script): status, holds, fence, ttl_ms, now_ms,
// recheck_ms, fair, then the keep-alive's until_ms and heartbeat_ms.
// Returns an error for a reply of another shape.
func lockAttempt(op string, res any) (attemptResult, error) {
	v, err := store.Int64s(op, res, 9)
	if err != nil {
		return attemptResult{}, err
	}
	return attemptResult{status: v[0], holdCount: v[1], fence: v[2],
		ttl: time.Duration(v[3]) * time.Millisecond, nowMS: v[4],
		recheck: time.Duration(v[5]) * time.Millisecond, fair: truth(v[6]),
		keepalive: keepaliveOf(v[7], v[8], v[4])}, nil
}

// acquire is the acquire of any primitive p: it checks and completes name
// and req (checkAcquire), then tries once or waits (see acquireWaiting). It
// returns the lease and the attempt that granted it (or refused it last),
// for what a primitive reads of its reply beside the lease.
func (s *Service) acquire(ctx context.Context, p primitive, name string, req AcquireRequest) (Lease, attemptResult, error) {
	a, err := s.checkAcquire(p, name, req)
	if err != nil {
		return Lease{}, attemptResult{}, err
	}
	a.k = s.keysIn(ctx, p.kind(), name)
	if req.Wait > 0 {
		return s.acquireWaiting(ctx, a)
	}
	r, err := s.attempt(ctx, a, 0)
	if err != nil {
		s.giveBack(ctx, a, err)
		return Lease{}, r, err
	}
	if r.granted() {
		lease, err := s.handOut(ctx, a, r)
		return lease, r, err
	}
	lease, err := s.outcome(a, r)
	return lease, r, err
}

// attempt is runAttempt, with the lease's place in its tenant's quota when
// the tenant has a lease quota (see attemptPlaced). waiterTimeout > 0
// registers the caller as a waiter for that long when it is not granted.
func (s *Service) attempt(ctx context.Context, a acquisition, waiterTimeout time.Duration) (attemptResult, error) {
	limit := s.quotaOf(ctx).Leases
	if limit <= 0 {
		return s.runAttempt(ctx, a, waiterTimeout)
	}
	var r attemptResult
	err := s.attemptPlaced(ctx, a.k, a.req.Token, limit, s.grantBound(a.req), waiterTimeout > 0, func() (bool, time.Duration, error) {
		var err error
		r, err = s.runAttempt(ctx, a, waiterTimeout)
		return err == nil && r.granted(), placeLasts(r.ttl, r.keepalive, r.nowMS), err
	}, func(ctx context.Context) { _, _ = a.p.release(ctx, a.k, a.req.Token) })
	return r, err
}

// runAttempt runs a.p's acquire script once for a, as the primitive names
// it (acquireCall), and reads its reply as the primitive does
// (readAttempt). waiterTimeout > 0 registers the caller as a waiter for
// that long when it is not granted. Returns the error of the script's run
// or of its reply.
func (s *Service) runAttempt(ctx context.Context, a acquisition, waiterTimeout time.Duration) (attemptResult, error) {
	script, keys, args := a.p.acquireCall(a, waiterTimeout)
	res, err := s.st.RunReplicated(ctx, script, keys, args...)
	if err != nil {
		return attemptResult{}, err
	}
	return a.p.readAttempt(a, res)
}

// outcome turns an attempt into a lease, or the primitive's error that
// says why not, and counts it.
func (s *Service) outcome(a acquisition, r attemptResult) (Lease, error) {
	if !r.granted() {
		return Lease{}, a.p.refusal(a.k.name, r)
	}
	lease := Lease{
		Name: a.k.name, Token: a.req.Token, Fence: r.fence, HoldCount: r.holdCount,
		TTL:       r.ttl,
		ExpiresAt: time.UnixMilli(r.nowMS + r.ttl.Milliseconds()).UTC(),
		Reentrant: r.status == acquireReentered,
		Keepalive: r.keepalive,
		Mode:      r.mode,
	}
	a.p.countGrant(lease.Reentrant)
	return lease, nil
}

// handOut returns the lease of an attempt that granted it, unless ctx ended
// meanwhile (the client went away) and ctx's error is returned. Then nobody
// will learn of the hold: under a token the service generated (ownToken) it
// is released, exactly the hold the attempt added. Under a token the client
// chose it is left for the client to settle, as giveBack does: the client
// may already be asking again with the same token (a retry after a lost
// answer), and a release racing with that retry would free a lock the
// client is told it holds.
func (s *Service) handOut(ctx context.Context, a acquisition, r attemptResult) (Lease, error) {
	lease, err := s.outcome(a, r)
	s.markShard(ctx, a.k, lease.Keepalive, lease.TTL, lease.ExpiresAt)
	if cerr := ctx.Err(); cerr != nil {
		if !a.ownToken {
			return Lease{}, cerr
		}
		if _, rerr := a.p.release(context.WithoutCancel(ctx), a.k, a.req.Token); rerr != nil {
			return Lease{}, errors.Join(cerr, rerr)
		}
		return Lease{}, cerr
	}
	return lease, err
}

// giveBack releases, best effort, the lease that a failed attempt may have
// been granted. When the attempt's reply is lost (a timeout, a dropped
// connection, a caller that went away mid-script) the script may have run,
// and a lease nobody was told about would live until its TTL, or max_hold
// when kept alive. The release runs in the background, detached from ctx
// and bounded by OpTimeout, so the caller's error comes back at once; if
// Redis does not take the release either, the lease stays as it would have.
//
// It only does so for a token the service generated for this request
// (ownToken): no one else knows it, so any lease under it is this attempt's,
// and a release frees exactly that. A token the caller chose may already
// hold the lock: the lost attempt was then a re-entry or nothing at all,
// and nothing tells which, as the reply is what was lost. A release would
// drop a hold the caller had before whenever the attempt did not run, and
// could free a lock the caller believes it holds. So nothing is released:
// the caller, who knows its token, releases what it does not want (a 503
// on acquire leaves the outcome unknown).
//
// A Redis error reply is an answer, not a lost one: the script did not run
// (BUSY, LOADING, READONLY, ...) and there is nothing to give back.
func (s *Service) giveBack(ctx context.Context, a acquisition, err error) {
	if !a.ownToken || store.IsServerError(err) {
		return
	}
	if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return
	}
	go func() { _, _ = a.p.release(context.WithoutCancel(ctx), a.k, a.req.Token) }()
}

const (
	// queueHold is how far ahead an attempt registers a waiter that holds
	// up others (see holdsUpOthers; its remaining wait when shorter), and
	// queueRenew how often its wait makes an attempt when nothing woke it
	// sooner: each attempt renews the registration, so a waiter whose
	// process died blocks a queue for at most queueHold plus queueGrace,
	// whatever its wait (Redisson's fair lock bounds it the same way, by
	// its thread wait time). Any other waiter is registered for its whole
	// wait and costs Redis nothing while nothing changes.
	queueHold  = 6 * time.Second
	queueRenew = queueHold / 3
	// queueGrace is how much longer than that a waiter stays registered
	// in Redis, so its last attempt at the deadline still finds it queued.
	queueGrace = 250 * time.Millisecond
	// minRecheck bounds how often a waiter re-checks without a wake-up.
	minRecheck = 5 * time.Millisecond
)

// waiting is the state of one acquisition's wait that its end needs.
type waiting struct {
	calls    context.Context // every Redis call of the wait runs under it
	deadline time.Time       // calls' deadline: the wait plus one Redis timeout
	// registered: an attempt may have registered the caller as a waiter.
	registered bool
	// failed: the last attempt's reply was lost.
	failed bool
}

// acquireWaiting is acquire with a wait (Redisson's model, made robust):
//   - it listens on the lock's channel before the first attempt, so a
//     release after that attempt is heard; it does not wait for Redis to
//     confirm the subscription, but an attempt made before the confirmation
//     is made again once it arrives (a release in between was not heard);
//   - a message is a hint to try again, never proof that the lock is free;
//     which waiters of the process a message wakes is the primitive's
//     (primitive.listen): one release may let one waiter in, or several;
//   - without a message it tries again after min(holder's remaining TTL,
//     remaining wait) (fair mode: the queue head's deadline when the lock is
//     free), so an expired lease, a lost message or a dead subscriber
//     connection never strands it; and, when it holds up other waiters
//     (holdsUpOthers), at least every queueRenew, renewing its
//     registration (below);
//   - every grant publishes a notice of the new lease's TTL: the waiter
//     brings its re-check forward to that lease's end when that is sooner,
//     without an attempt (see pause), so a queue head granted a lease that
//     expires unreleased does not strand the waiters behind it until its
//     queue deadline;
//   - when ctx ends (the client went away) it stops at once, takes nothing
//     and leaves the fair queue;
//   - when an attempt's reply is lost, a lease it may have granted under a
//     token the service generated is given back (see giveBack).
//
// While it waits, the caller is registered in Redis with a deadline from the
// Redis clock (and queued, in fair mode), so waiters of every process are
// counted and a fair queue skips a waiter that is gone: one that left, or
// whose process died and so stopped renewing its registration.
//
// It answers within the wait plus one Redis timeout (Config.OpTimeout),
// whatever Redis does: every Redis call it makes (the attempts, and leaving
// the waiters when it gives up) runs under one deadline, set once when it
// starts, and it never waits for the subscription. When an attempt fails,
// leaving the waiters is not waited for: the caller is answered at once.
func (s *Service) acquireWaiting(ctx context.Context, a acquisition) (lease Lease, r attemptResult, err error) {
	start := time.Now()
	waitEnd := start.Add(a.req.Wait)
	leaveQuota, err := s.waiterPlace(ctx, a.req.Wait)
	if err != nil {
		a.p.countWait(err)
		return Lease{}, r, err
	}
	defer leaveQuota()
	w := waiting{deadline: waitEnd.Add(s.opTimeout)}
	// Attempts run to completion even when the client goes away, so the
	// service always knows whether it was granted the lock (and gives it
	// back); all of them are still bounded by the request's deadline.
	calls, cancel := context.WithDeadline(context.WithoutCancel(ctx), w.deadline)
	defer cancel()
	w.calls = calls
	l, err := a.p.listen(a.k, a.req)
	if err != nil {
		err = fmt.Errorf("wait for %s: %w: %w", a.k.name, store.ErrUnavailable, err)
		a.p.countWait(err)
		return Lease{}, r, err
	}
	defer func() {
		if err != nil {
			s.quitWaiting(ctx, a, w)
		}
		l.leave(err != nil)
		a.p.countWait(err)
	}()

	ready := l.Ready() // nil once an attempt was made after the confirmation
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	queued := holdsUpOthers(a.p.kind(), a.req)
	for first := true; ; first = false {
		remaining, waiterTimeout, final := waitTurn(waitEnd, queued)
		ready = unlessClosed(ready)
		tried := time.Now()
		r, err = s.attempt(calls, a, waiterTimeout)
		a.tried = true
		if err != nil {
			// The script may have run and registered (and queued) the
			// caller although its answer is lost: leave, or a fair queue
			// waits behind a waiter that is gone until its deadline.
			w.registered = w.registered || waiterTimeout > 0
			w.failed = true
			s.giveBack(calls, a, err)
			return Lease{}, r, err
		}
		if r.granted() {
			// When the client went away during the attempt, it takes nothing.
			lease, err = s.handOut(ctx, a, r)
			if !first {
				lease.Waited = tried.Sub(start)
			}
			return lease, r, err
		}
		if r.status == acquireModeMismatch || r.status == acquireRefused || final {
			w.registered = w.registered || r.status == acquireNotGranted && waiterTimeout > 0
			lease, err = s.outcome(a, r)
			return lease, r, err
		}
		w.registered = true
		after := recheckAfter(r.recheck, remaining)
		if queued {
			after = min(after, queueRenew) // in time to renew its registration
		}
		if err := s.pause(ctx, l, ready, timer, after, waitEnd); err != nil {
			return Lease{}, r, err
		}
	}
}

// pause waits, after an attempt of a wait ending at waitEnd that was not
// granted, until the next attempt is due: a wake-up on l, the
// subscription's confirmation (ready: the attempt may have missed a
// release), or the re-check, after from now (on timer). A grant's notice is
// no reason to try, as the lease it names blocks this waiter too; it brings
// the re-check forward to that lease's end (recheckAfter its TTL) when that
// is sooner, with no call to Redis: a waiter told to re-check at a queue
// head's deadline is not stranded there when the head's lease expires
// unreleased, which publishes nothing. Returns ctx's error when ctx ends
// first (the client went away).
func (s *Service) pause(ctx context.Context, l wakeups, ready <-chan struct{}, timer *time.Timer, after time.Duration, waitEnd time.Time) error {
	due := time.Now().Add(after)
	timer.Reset(after)
	s.rechecking(after, false)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case msg := <-l.C():
			n, notice := parseAcquired(msg)
			if !notice {
				return nil
			}
			after := recheckAfter(n.ttl, time.Until(waitEnd))
			if at := time.Now().Add(after); at.Before(due) {
				due = at
				timer.Reset(after)
				s.rechecking(after, true)
			}
		case <-ready:
			return nil
		case <-timer.C:
			return nil
		}
	}
}

// rechecking tells the test hook, when one is set (onRecheck), that a
// wait's next re-check is due after from now, set after an attempt or
// brought forward by a grant's notice (byNotice).
func (s *Service) rechecking(after time.Duration, byNotice bool) {
	if s.onRecheck != nil {
		s.onRecheck(after, byNotice)
	}
}

// waitTurn is the head of each turn of a wait that ends at waitEnd: the
// time left, whether this attempt is the last (the wait is over), and the
// waiter timeout the attempt registers the caller with when it is not
// granted (none on the last attempt): the time left plus queueGrace, the
// time left at most queueHold when the waiter is queued (holdsUpOthers).
func waitTurn(waitEnd time.Time, queued bool) (remaining, waiterTimeout time.Duration, final bool) {
	remaining = time.Until(waitEnd)
	final = remaining <= time.Millisecond
	if !final {
		waiterTimeout = remaining + queueGrace
		if queued {
			waiterTimeout = min(remaining, queueHold) + queueGrace
		}
	}
	return remaining, waiterTimeout, final
}

// holdsUpOthers reports whether a waiter of kind k asking req holds up
// other waiters while it is registered, so that its registration must end
// soon when its process dies: in a fair queue (an election's is always),
// or as a read/write lock's writer, which the readers after it queue
// behind.
func holdsUpOthers(k kind, req AcquireRequest) bool {
	return req.Fair || k == kindEl || k == kindRW && req.Mode == ModeWrite
}

// unlessClosed is c, or nil once c is closed: a wait selects on its
// subscription's confirmation until it came, then makes one more attempt
// (the first may have missed a release) and stops looking.
func unlessClosed(c <-chan struct{}) <-chan struct{} {
	if isClosed(c) {
		return nil
	}
	return c
}

// isClosed reports whether c is closed; a nil c is not.
func isClosed(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// recheckAfter is how long a waiter sleeps without a wake-up: until the
// script's re-check time (plus a millisecond, so an expiring lease is gone),
// but never past the end of the wait and never in a tight loop.
func recheckAfter(recheck, remaining time.Duration) time.Duration {
	if recheck < 0 { // the holder's key has no TTL: only the wait bounds it
		return remaining
	}
	return min(max(recheck+time.Millisecond, minRecheck), remaining)
}

// quitWaiting leaves the waiters after a wait w that ended without the
// lease, when one of its attempts may have registered the caller: at once
// when the last attempt answered, and in the background when it failed, so
// that the caller is answered at once (its calls' context may be over).
func (s *Service) quitWaiting(ctx context.Context, a acquisition, w waiting) {
	switch {
	case !w.registered:
	case w.failed:
		go s.leaveWaiters(context.WithoutCancel(ctx), w.deadline, a)
	default:
		s.leaveWaiters(w.calls, w.deadline, a)
	}
}

// leaveWaiters removes a waiter that gives up from Redis's waiters and fair
// queue, waking the rest when it was queued for a free lock, unless the
// request's deadline has passed. A failure is not reported: the entry
// expires at the waiter's deadline anyway.
func (s *Service) leaveWaiters(ctx context.Context, deadline time.Time, a acquisition) {
	if !time.Now().Before(deadline) {
		return
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	_ = a.p.leave(ctx, a.k, a.req.Token)
}

// waitOutcome names the outcome of any primitive's wait, as its metric
// counts it: acquired, timeout (still held, too few permits free, or
// another leader, when the wait ended), canceled, conflict or error.
func waitOutcome(err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.As(err, new(*HeldError)), errors.As(err, new(*PermitsUnavailableError)), errors.As(err, new(*ElectionHeldError)):
		return "timeout"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	}
	return "error"
}
