package locks

import (
	"context"
	"errors"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

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
}

// Released is the outcome of a release.
type Released struct {
	Released  bool   // true when the lease is now gone (the lock free, for the exclusive lock)
	HoldCount int64  // holds that remain
	Mode      RWMode // a read/write lock's lease that was released; else empty
}

// LockState is what inspection reveals about a lock. It never includes the
// owner's token.
type LockState struct {
	Name      string
	Held      bool
	HoldCount int64
	TTL       time.Duration
	ExpiresAt time.Time
	Fence     int64      // the holder's fence, or the last fence issued when free
	Owned     bool       // the token given to Inspect owns the lease
	Waiters   int64      // waiters whose wait has not ended, in every process
	Fair      bool       // held by a fair lease, or fair waiters are queued
	Keepalive *Keepalive // set when the lease is kept alive by the service
	Owner     string     // the owner text the lease was granted with, when held and given
	GrantedAt time.Time  // when the lease was granted (Redis clock), when held
	// LostReason says why the token given to Inspect lost its lease (one of
	// the Lost* constants), when it does not own it and that is known.
	LostReason string
}

func (s *Service) checkTTL(field string, d time.Duration) error {
	switch {
	case d < s.cfg.MinTTL:
		return invalid(field, "min", "%s must be at least %s", field, s.cfg.MinTTL)
	case d > s.cfg.MaxTTL:
		return invalid(field, "max", "%s must be at most %s", field, s.cfg.MaxTTL)
	}
	return nil
}

// Acquire takes the lock name for req.Token, or re-enters it when req.Token
// already owns it (incrementing the hold count and refreshing the TTL). With
// req.Wait it waits up to that long for the lock (see acquireWaiting).
// Returns a *ValidationError (ErrInvalid) for a bad name, token, TTL, wait or owner,
// a *HeldError (ErrConflict) when another token holds the lock (after the
// wait), a *ModeError (ErrConflict) when req.Fair differs from the lock's
// mode, a *store.QuotaError (ErrConflict) when the tenant ctx acts for is at
// its lease or waiter quota (see quota.go), ctx's error when ctx ends
// first, or an error wrapping ErrUnavailable when Redis cannot be reached
// or does not answer in time.
// On ctx's error or ErrUnavailable the caller holds nothing it was told of:
// a lease the script granted anyway is given back, best effort, when the
// service generated the token; under a token the caller chose, it is the
// caller's to release (see giveBack).
func (s *Service) Acquire(ctx context.Context, name string, req AcquireRequest) (Lease, error) {
	if err := ValidateName(name); err != nil {
		return Lease{}, err
	}
	return s.acquire(ctx, s.mutex, name, req)
}

// acquire is Acquire of any primitive p, for a valid name: it checks and
// completes the rest of req, then tries once or waits (see acquireWaiting).
func (s *Service) acquire(ctx context.Context, p primitive, name string, req AcquireRequest) (Lease, error) {
	ownToken := req.Token == ""
	if ownToken {
		req.Token = NewToken()
	} else if err := ValidateToken(req.Token); err != nil {
		return Lease{}, err
	}
	keepTTL := req.TTL == 0 // a re-entry without a ttl keeps the lease's own
	if keepTTL {
		req.TTL = s.cfg.DefaultTTL
	}
	if err := s.checkTTL("ttl", req.TTL); err != nil {
		return Lease{}, err
	}
	if err := ValidateOwner(req.Owner); err != nil {
		return Lease{}, err
	}
	switch {
	case req.Wait < 0:
		return Lease{}, invalid("wait", "min", "wait must not be negative")
	case req.Wait > s.cfg.MaxWait:
		return Lease{}, invalid("wait", "max", "wait must be at most %s", s.cfg.MaxWait)
	}
	if err := s.checkKeepalive(&req); err != nil {
		return Lease{}, err
	}
	k := s.keysIn(ctx, p.kind(), name)
	if req.Wait > 0 {
		return s.acquireWaiting(ctx, p, k, req, keepTTL, ownToken)
	}
	r, err := s.attempt(ctx, p, k, req, 0, keepTTL)
	if err != nil {
		s.giveBack(ctx, p, k, req.Token, ownToken, err)
		return Lease{}, err
	}
	if r.granted() {
		return s.handOut(ctx, p, k, req.Token, ownToken, r)
	}
	return s.outcome(name, req.Token, r)
}

// mutex is the exclusive lock as a primitive (see primitive.go).
type mutex struct{ leaseBase }

func (mutex) kind() kind { return kindMutex }

// broadcast: one release lets one waiter in; fair waiters all hear it, as
// only the queue's head may take the lock.
func (mutex) broadcast(req AcquireRequest) bool { return req.Fair }

// attempt is one run of the acquire script. waiterTimeout > 0 registers the
// caller as a waiter for that long when the lock is not granted. keepTTL
// makes a re-entry keep the lease's own TTL (the request gave none).
func (m mutex) attempt(ctx context.Context, k lockKeys, req AcquireRequest, waiterTimeout time.Duration, keepTTL bool) (attemptResult, error) {
	s := m.s
	res, err := s.st.RunReplicated(ctx, mutexScripts.acquire, []string{k.lock, k.fence, k.waiters, k.queue, s.registryKey(k), k.lost},
		acquireArgs(s.cfg, kindMutex, req, k.regName(), waiterTimeout, keepTTL, 0)...)
	if err != nil {
		return attemptResult{}, err
	}
	v, err := store.Int64s("acquire", res, 9)
	if err != nil {
		return attemptResult{}, err
	}
	return attemptResult{status: v[0], holdCount: v[1], fence: v[2],
		ttl: time.Duration(v[3]) * time.Millisecond, nowMS: v[4],
		recheck: time.Duration(v[5]) * time.Millisecond, fair: truth(v[6]),
		keepalive: keepaliveOf(v[7], v[8], v[4])}, nil
}

// attemptResult is the decoded reply of the acquire script.
type attemptResult struct {
	status    int64 // acquireGranted, acquireReentered, acquireNotGranted or acquireModeMismatch
	holdCount int64
	fence     int64
	ttl       time.Duration // the lease's TTL, or the holder's remaining TTL
	nowMS     int64
	recheck   time.Duration // when not granted: retry by then without a wake-up
	fair      bool          // the lock's mode
	keepalive *Keepalive    // a granted keep-alive lease's bounds
	mode      RWMode        // the lease's mode (read/write lock)
	refused   error         // a primitive's own refusal (ErrConflict), when status is acquireRefused
}

// granted reports a grant, new or reentrant.
func (r attemptResult) granted() bool {
	return r.status == acquireGranted || r.status == acquireReentered
}

// outcome turns an attempt into a lease or the error that says why not.
func (s *Service) outcome(name, token string, r attemptResult) (Lease, error) {
	switch r.status {
	case acquireNotGranted:
		s.metrics.conflicts.Inc()
		retry := r.ttl
		if retry <= 0 {
			retry = r.recheck
		}
		return Lease{}, &HeldError{Name: name, RetryAfter: retry}
	case acquireModeMismatch:
		s.metrics.conflicts.Inc()
		return Lease{}, &ModeError{Name: name, Fair: r.fair}
	case acquireRefused:
		s.metrics.conflicts.Inc()
		return Lease{}, r.refused
	}
	lease := Lease{
		Name: name, Token: token, Fence: r.fence, HoldCount: r.holdCount,
		TTL:       r.ttl,
		ExpiresAt: time.UnixMilli(r.nowMS + r.ttl.Milliseconds()).UTC(),
		Reentrant: r.status == acquireReentered,
		Keepalive: r.keepalive,
		Mode:      r.mode,
	}
	if lease.Reentrant {
		s.metrics.grants.WithLabelValues("reentrant").Inc()
	} else {
		s.metrics.grants.WithLabelValues("new").Inc()
	}
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
func (s *Service) handOut(ctx context.Context, p primitive, k lockKeys, token string, ownToken bool, r attemptResult) (Lease, error) {
	lease, err := s.outcome(k.name, token, r)
	s.markShard(ctx, k, lease.Keepalive, lease.TTL, lease.ExpiresAt)
	if cerr := ctx.Err(); cerr != nil {
		if !ownToken {
			return Lease{}, cerr
		}
		if _, rerr := p.release(context.WithoutCancel(ctx), k, token); rerr != nil {
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
func (s *Service) giveBack(ctx context.Context, p primitive, k lockKeys, token string, ownToken bool, err error) {
	if !ownToken || store.IsServerError(err) {
		return
	}
	if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return
	}
	go func() { _, _ = p.release(context.WithoutCancel(ctx), k, token) }()
}

// Renew extends the lease on name owned by token to ttl (zero: the lease's
// own TTL). A keep-alive lease is renewed at most to its max-hold deadline,
// the renewal counts as its heartbeat, a new ttl sets the interval of the
// service's renewals (ttl/3), and the lease returned carries its Keepalive.
// A ttl that ends the lease sooner wakes the lock's waiters and hold streams
// to re-check. Returns ErrNotFound when no lease exists, ErrNotOwner
// (ErrConflict) when another token holds it, a *ValidationError for bad
// input, or an error wrapping ErrUnavailable.
func (s *Service) Renew(ctx context.Context, name, token string, ttl time.Duration) (Lease, error) {
	if err := s.checkRenew(name, token, ttl); err != nil {
		return Lease{}, err
	}
	k := s.keys(ctx, name)
	lease, err := s.mutex.renew(ctx, k, token, ttl)
	s.markRenewed(ctx, k, ttl, lease.Keepalive, lease.TTL, lease.ExpiresAt)
	if err == nil {
		s.setPlace(ctx, k, token, leaseLasts(lease))
	}
	return lease, err
}

func (m mutex) renew(ctx context.Context, k lockKeys, token string, ttl time.Duration) (Lease, error) {
	s := m.s
	res, err := s.st.RunReplicated(ctx, mutexScripts.renew, []string{k.lock, k.lost, s.registryKey(k), k.channel, k.fence},
		renewArgs(s.cfg, kindMutex, k.regName(), token, ttl, 0)...)
	v, err := ownerReply("renew", 7, res, err)
	if err != nil {
		return Lease{}, err
	}
	return Lease{
		Name: k.name, Token: token, HoldCount: v[1], Fence: v[2],
		TTL:       time.Duration(v[3]) * time.Millisecond,
		ExpiresAt: time.UnixMilli(v[4] + v[3]).UTC(),
		Keepalive: keepaliveOf(v[5], v[6], v[4]), // the renewal is the heartbeat
	}, nil
}

// Release drops one hold of the lease on name owned by token; the last hold
// frees the lock and wakes its waiters. Returns ErrNotFound, ErrNotOwner, a
// *ValidationError or an error wrapping ErrUnavailable.
func (s *Service) Release(ctx context.Context, name, token string) (Released, error) {
	if err := checkNameToken(name, token); err != nil {
		return Released{}, err
	}
	return s.mutex.release(ctx, s.keys(ctx, name), token)
}

func (m mutex) release(ctx context.Context, k lockKeys, token string) (Released, error) {
	s := m.s
	res, err := s.st.RunReplicated(ctx, mutexScripts.release, []string{k.lock, k.channel, s.registryKey(k), k.lost, k.fence},
		releaseArgs(s.cfg, kindMutex, k.regName(), token)...)
	v, err := ownerReply("release", 2, res, err)
	if err != nil {
		return Released{}, err
	}
	s.countRelease(v[1])
	s.released(ctx, k, token, v[1])
	return Released{Released: v[1] == 0, HoldCount: v[1]}, nil
}

// countRelease counts a release that leaves holds holds.
func (s *Service) countRelease(holds int64) {
	if holds == 0 {
		s.metrics.releases.WithLabelValues("final").Inc()
	} else {
		s.metrics.releases.WithLabelValues("partial").Inc()
	}
}

// ForceRelease frees the lock name whoever holds it, bumps its fence so the
// evicted holder's fence is stale, and wakes waiters. It reports whether a
// lease was removed. Returns a *ValidationError or an error wrapping
// ErrUnavailable.
func (s *Service) ForceRelease(ctx context.Context, name string) (bool, error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	k := s.keys(ctx, name)
	res, err := s.st.RunReplicated(ctx, mutexScripts.forceRelease, []string{k.lock, k.fence, k.channel, s.registryKey(k), k.lost},
		forceReleaseArgs(s.cfg, k.regName())...)
	if err != nil {
		return false, err
	}
	status, _ := res.(int64)
	removed := status == forceRemoved // else forceFree
	if removed {
		s.metrics.releases.WithLabelValues("forced").Inc()
		s.evictPlaces(ctx, k)
	}
	return removed, nil
}

// Inspect reads the state of lock name; with a token it also reports whether
// that token owns the lease. Returns a *ValidationError or an error wrapping
// ErrUnavailable.
func (s *Service) Inspect(ctx context.Context, name, token string) (LockState, error) {
	if err := checkNameOptionalToken(name, token); err != nil {
		return LockState{}, err
	}
	k := s.keys(ctx, name)
	res, err := s.st.Run(ctx, mutexScripts.inspect, []string{k.lock, k.fence, k.waiters, k.queue, k.lost, s.registryKey(k)},
		inspectArgs(kindMutex, k.regName(), token)...)
	arr, v, err := inspectReply("inspect", 14, 11, res, err)
	if err != nil {
		return LockState{}, err
	}
	st := LockState{Name: name, Held: truth(v[0]), HoldCount: v[1], Fence: v[3], Owned: truth(v[4]),
		Waiters: v[6], Fair: truth(v[7])}
	st.LostReason, _ = arr[11].(string)
	if st.Held {
		st.Owner, _ = arr[12].(string)
		if us, ok := arr[13].(int64); ok && us > 0 {
			st.GrantedAt = time.UnixMicro(us).UTC()
		}
		st.TTL = time.Duration(v[2]) * time.Millisecond
		st.ExpiresAt = time.UnixMilli(v[5] + v[2]).UTC()
		st.Keepalive = keepaliveOf(v[8], v[9], v[10])
	}
	return st, nil
}

func (m mutex) lostReason(ctx context.Context, k lockKeys, token string) string {
	st, _ := m.s.Inspect(ctx, k.name, token) // a failed inspect has no reason
	return st.LostReason
}

// leave also takes the lock: a waiter leaving a free lock wakes the next.
func (m mutex) leave(ctx context.Context, k lockKeys, token string) error {
	_, err := m.s.st.Run(ctx, m.ls.leave, []string{k.lock, k.waiters, k.queue, k.channel}, leaveArgs(token)...)
	return err
}

func (mutex) batchKeys(keys []string, k lockKeys) []string { return append(keys, k.lock, k.lost) }
