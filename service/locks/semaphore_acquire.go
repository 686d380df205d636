package locks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// AcquireSemaphore takes req.Count of the req.Permits permits of semaphore
// name as one lease under req.Token (generated when empty). With req.Wait it
// waits up to that long for enough permits, woken by pub/sub as a lock
// waiter is (see acquireWaiting); in fair mode waiters are served in arrival
// order, and a waiter wanting more permits than are free holds back those
// behind it. Returns a *ValidationError (ErrInvalid) for bad input, a
// *PermitsMismatchError when the semaphore has another capacity, a
// *PermitsUnavailableError when too few permits are free (after the wait), a
// *ModeError when req.Fair differs from the semaphore's mode, ErrTokenInUse
// when the token already holds a lease on it, a *store.QuotaError when the
// tenant is at a quota (as Acquire), ctx's error when ctx ends first, or an
// error wrapping ErrUnavailable. On ctx's error or ErrUnavailable a lease
// the script granted anyway under a token the service generated is given
// back, best effort.
func (s *Service) AcquireSemaphore(ctx context.Context, name string, req SemaphoreRequest) (SemaphoreLease, error) {
	ownToken, err := s.checkSemaphore(name, &req)
	if err != nil {
		return SemaphoreLease{}, err
	}
	k := s.semKeys(ctx, name)
	if req.Wait > 0 {
		return s.semWaiting(ctx, k, req, ownToken)
	}
	r, err := s.semAttemptPlaced(ctx, k, req, 0)
	if err != nil {
		s.semGiveBack(ctx, k, req.Token, ownToken, err)
		return SemaphoreLease{}, err
	}
	return s.semHandOut(ctx, k, req, ownToken, r)
}

// semResult is the decoded reply of sem_acquire.lua.
type semResult struct {
	status    int64
	fence     int64
	ttl       time.Duration
	nowMS     int64
	recheck   time.Duration
	fair      bool
	keepalive *Keepalive
	permits   int64
	available int64
}

// semAttempt is one run of sem_acquire.lua. waiterTimeout > 0 registers the
// caller as a waiter for that long when it is not granted.
func (s *Service) semAttempt(ctx context.Context, k lockKeys, req SemaphoreRequest, waiterTimeout time.Duration) (semResult, error) {
	res, err := s.st.RunReplicated(ctx, semScripts.acquire,
		[]string{k.lock, k.holders, k.leases, k.waiters, k.queue, s.registryKey(k), k.lost, k.channel},
		semAcquireArgs(s.cfg, req, k.regName(), waiterTimeout)...)
	if err != nil {
		return semResult{}, err
	}
	v, err := store.Int64s("sem_acquire", res, 10)
	if err != nil {
		return semResult{}, err
	}
	return semResult{status: v[0], fence: v[1], ttl: time.Duration(v[2]) * time.Millisecond, nowMS: v[3],
		recheck: time.Duration(v[4]) * time.Millisecond, fair: truth(v[5]),
		keepalive: keepaliveOf(v[6], v[7], v[3]), permits: v[8], available: v[9]}, nil
}

// semAttemptPlaced is semAttempt with the lease's place (see attemptPlaced).
func (s *Service) semAttemptPlaced(ctx context.Context, k lockKeys, req SemaphoreRequest, waiterTimeout time.Duration) (semResult, error) {
	var r semResult
	err := s.attemptPlaced(ctx, k, req.Token, s.grantBound(req.AcquireRequest), waiterTimeout > 0, func() (bool, time.Duration, error) {
		var err error
		r, err = s.semAttempt(ctx, k, req, waiterTimeout)
		return err == nil && r.status == semGranted, placeLasts(r.ttl, r.keepalive, r.nowMS), err
	}, func(ctx context.Context) { _, _ = s.releaseSemaphore(ctx, k, req.Token) })
	return r, err
}

// semOutcome turns an attempt into a lease or the error that says why not.
func (s *Service) semOutcome(name string, req SemaphoreRequest, r semResult) (SemaphoreLease, error) {
	switch r.status {
	case semGranted:
		s.semMetrics.grants.Inc()
		return SemaphoreLease{Name: name, Token: req.Token, Count: req.Count, Permits: r.permits,
			Available: max(r.available, 0), Fence: r.fence, TTL: r.ttl,
			ExpiresAt: time.UnixMilli(r.nowMS + r.ttl.Milliseconds()).UTC(), Keepalive: r.keepalive}, nil
	case semNotGranted:
		s.semMetrics.conflicts.WithLabelValues("unavailable").Inc()
		return SemaphoreLease{}, &PermitsUnavailableError{Name: name, Available: max(r.available, 0), RetryAfter: r.recheck}
	case semModeMismatch:
		s.semMetrics.conflicts.WithLabelValues("mode").Inc()
		return SemaphoreLease{}, &ModeError{Name: name, Fair: r.fair}
	case semPermitsMismatch:
		s.semMetrics.conflicts.WithLabelValues("permits").Inc()
		return SemaphoreLease{}, &PermitsMismatchError{Name: name, Permits: r.permits}
	case semTokenHoldsALease:
		s.semMetrics.conflicts.WithLabelValues("token").Inc()
		return SemaphoreLease{}, ErrTokenInUse
	}
	return SemaphoreLease{}, fmt.Errorf("sem_acquire: unknown status %d", r.status)
}

// semHandOut returns the outcome of an attempt, unless it granted the
// permits while ctx ended (the client went away): then, under a token the
// service generated, the lease is given back and ctx's error returned (see
// handOut).
func (s *Service) semHandOut(ctx context.Context, k lockKeys, req SemaphoreRequest, ownToken bool, r semResult) (SemaphoreLease, error) {
	lease, err := s.semOutcome(k.name, req, r)
	s.markShard(ctx, k, lease.Keepalive, lease.TTL, lease.ExpiresAt)
	if cerr := ctx.Err(); cerr != nil && err == nil {
		if !ownToken {
			return SemaphoreLease{}, cerr
		}
		if _, rerr := s.ReleaseSemaphore(context.WithoutCancel(ctx), k.name, req.Token); rerr != nil {
			return SemaphoreLease{}, errors.Join(cerr, rerr)
		}
		return SemaphoreLease{}, cerr
	}
	return lease, err
}

// semGiveBack releases, in the background and best effort, the lease a
// failed attempt may have been granted under a token the service generated
// (see giveBack: the same reasoning holds).
func (s *Service) semGiveBack(ctx context.Context, k lockKeys, token string, ownToken bool, err error) {
	if !ownToken || store.IsServerError(err) {
		return
	}
	if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return
	}
	go func() { _, _ = s.ReleaseSemaphore(context.WithoutCancel(ctx), k.name, token) }()
}

// semWaiting is AcquireSemaphore with a wait, on the model of
// acquireWaiting: subscribed before the first attempt, a message is a hint
// to try again, a timed re-check covers a lost message or an expired lease,
// the caller's end stops the wait at once and leaves the waiters, and every
// Redis call runs under one deadline: the wait plus one Redis timeout.
// A release wakes the waiters of this process whose counts fit in the
// permits it freed (see semWakes); the script says which of them get them.
func (s *Service) semWaiting(ctx context.Context, k lockKeys, req SemaphoreRequest, ownToken bool) (lease SemaphoreLease, err error) {
	waitEnd := time.Now().Add(req.Wait)
	leaveQuota, err := s.waiterPlace(ctx, req.Wait)
	if err != nil {
		s.semWaitDone(err)
		return SemaphoreLease{}, err
	}
	defer leaveQuota()
	callDeadline := waitEnd.Add(s.opTimeout)
	calls, cancel := context.WithDeadline(context.WithoutCancel(ctx), callDeadline)
	defer cancel()
	sw, err := s.semWakes.join(k.channel, req.Count, req.Fair)
	if err != nil {
		err = fmt.Errorf("wait for %s: %w: %w", k.name, store.ErrUnavailable, err)
		s.semWaitDone(err)
		return SemaphoreLease{}, err
	}
	registered, failed := false, false
	defer func() {
		if err != nil {
			s.quitWaiting(ctx, calls, callDeadline, s.semaphore(), k, req.Token, registered, failed)
		}
		s.semWakes.leave(k.channel, sw)
		s.semWaitDone(err)
	}()
	ready := sw.ready
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		remaining, waiterTimeout, final := waitTurn(waitEnd)
		ready = unlessClosed(ready)
		r, err := s.semAttemptPlaced(calls, k, req, waiterTimeout)
		if err != nil {
			registered, failed = registered || waiterTimeout > 0, true
			s.semGiveBack(calls, k, req.Token, ownToken, err)
			return SemaphoreLease{}, err
		}
		if r.status != semNotGranted || final {
			registered = registered || r.status == semNotGranted && waiterTimeout > 0
			return s.semHandOut(ctx, k, req, ownToken, r)
		}
		registered = true
		timer.Reset(recheckAfter(r.recheck, remaining))
		select {
		case <-ctx.Done():
			return SemaphoreLease{}, ctx.Err()
		case <-sw.c:
		case <-ready:
		case <-timer.C:
		}
	}
}

// semWaitDone counts the outcome of a semaphore wait.
func (s *Service) semWaitDone(err error) { s.semMetrics.waits.WithLabelValues(waitOutcome(err)).Inc() }
