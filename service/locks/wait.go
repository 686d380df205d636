package locks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

const (
	// queueGrace is how much longer than its wait a waiter stays registered
	// in Redis, so its last attempt at the deadline still finds it queued.
	// A waiter whose process died blocks a fair queue for at most its wait
	// plus this.
	queueGrace = 250 * time.Millisecond
	// minRecheck bounds how often a waiter re-checks without a wake-up.
	minRecheck = 5 * time.Millisecond
)

// acquireWaiting is Acquire with a wait (Redisson's model, made robust):
//   - it subscribes to the lock's channel before the first attempt, so a
//     release after that attempt is heard; it does not wait for Redis to
//     confirm the subscription, but an attempt made before the confirmation
//     is made again once it arrives (a release in between was not heard);
//   - a message is a hint to try again, never proof that the lock is free;
//   - without a message it tries again after min(holder's remaining TTL,
//     remaining wait) (fair mode: the queue head's deadline when the lock is
//     free), so an expired lease, a lost message or a dead subscriber
//     connection never strands it;
//   - when ctx ends (the client went away) it stops at once, takes nothing
//     and leaves the fair queue;
//   - when an attempt's reply is lost, a lease it may have granted under a
//     token the service generated is given back (see giveBack).
//
// While it waits, the caller is registered in Redis with a deadline from the
// Redis clock (and queued, in fair mode), so waiters of every process are
// counted and a fair queue skips a waiter that is gone.
//
// It answers within the wait plus one Redis timeout (Config.OpTimeout),
// whatever Redis does: every Redis call it makes (the attempts, and leaving
// the waiters when it gives up) runs under one deadline, set once when it
// starts, and it never waits for the subscription. When an attempt fails,
// leaving the waiters is not waited for: the caller is answered at once.
func (s *Service) acquireWaiting(ctx context.Context, p primitive, k lockKeys, req AcquireRequest, keepTTL, ownToken bool) (lease Lease, err error) {
	name := k.name
	waitEnd := time.Now().Add(req.Wait)
	leaveQuota, err := s.waiterPlace(ctx, req.Wait)
	if err != nil {
		s.waitDone(err)
		return Lease{}, err
	}
	defer leaveQuota()
	callDeadline := waitEnd.Add(s.opTimeout)
	// Attempts run to completion even when the client goes away, so the
	// service always knows whether it was granted the lock (and gives it
	// back); all of them are still bounded by the request's deadline.
	calls, cancel := context.WithDeadline(context.WithoutCancel(ctx), callDeadline)
	defer cancel()
	l, err := s.sub.join(k.channel, p.broadcast(req))
	if err != nil {
		err = fmt.Errorf("wait for %s: %w: %w", name, store.ErrUnavailable, err)
		s.waitDone(err)
		return Lease{}, err
	}
	registered, failed := false, false
	defer func() {
		if err != nil {
			s.quitWaiting(ctx, calls, callDeadline, p, k, req.Token, registered, failed)
		}
		l.leave(err != nil)
		s.waitDone(err)
	}()

	ready := l.Ready() // nil once an attempt was made after the confirmation
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		remaining, waiterTimeout, final := waitTurn(waitEnd)
		ready = unlessClosed(ready)
		r, err := s.attempt(calls, p, k, req, waiterTimeout, keepTTL)
		if err != nil {
			// The script may have run and registered (and queued) the
			// caller although its answer is lost: leave, or a fair queue
			// waits behind a waiter that is gone until its deadline.
			registered = registered || waiterTimeout > 0
			failed = true
			s.giveBack(calls, p, k, req.Token, ownToken, err)
			return Lease{}, err
		}
		if r.granted() {
			// When the client went away during the attempt, it takes nothing.
			return s.handOut(ctx, p, k, req.Token, ownToken, r)
		}
		if r.status == acquireModeMismatch || r.status == acquireRefused || final {
			registered = registered || r.status == acquireNotGranted && waiterTimeout > 0
			return s.outcome(name, req.Token, r)
		}
		registered = true
		timer.Reset(recheckAfter(r.recheck, remaining))
		select {
		case <-ctx.Done():
			return Lease{}, ctx.Err()
		case <-l.C():
		case <-ready: // the attempt may have missed a release: try again
		case <-timer.C:
		}
	}
}

// waitTurn is the head of each turn of a wait that ends at waitEnd: the
// time left, whether this attempt is the last (the wait is over), and the
// waiter timeout the attempt registers the caller with when it is not
// granted (none on the last attempt).
func waitTurn(waitEnd time.Time) (remaining, waiterTimeout time.Duration, final bool) {
	remaining = time.Until(waitEnd)
	final = remaining <= time.Millisecond
	if !final {
		waiterTimeout = remaining + queueGrace
	}
	return remaining, waiterTimeout, final
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

// quitWaiting leaves the waiters after a wait that ended without the lease,
// when one of its attempts may have registered the caller: at once when the
// last attempt answered, and in the background when it failed, so that the
// caller is answered at once (its calls' context may be over).
func (s *Service) quitWaiting(ctx, calls context.Context, deadline time.Time, p primitive, k lockKeys, token string, registered, failed bool) {
	switch {
	case !registered:
	case failed:
		go s.leaveWaiters(context.WithoutCancel(ctx), deadline, p, k, token)
	default:
		s.leaveWaiters(calls, deadline, p, k, token)
	}
}

// leaveWaiters removes a waiter that gives up from Redis's waiters and fair
// queue, waking the rest when it was queued for a free lock, unless the
// request's deadline has passed. A failure is not reported: the entry
// expires at the waiter's deadline anyway.
func (s *Service) leaveWaiters(ctx context.Context, deadline time.Time, p primitive, k lockKeys, token string) {
	if !time.Now().Before(deadline) {
		return
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	_ = p.leave(ctx, k, token)
}

// waitDone counts the outcome of a wait.
func (s *Service) waitDone(err error) { s.metrics.waits.WithLabelValues(waitOutcome(err)).Inc() }

// waitOutcome names the outcome of any primitive's wait, as its metric
// counts it: acquired, timeout (still held, or too few permits free, when
// the wait ended), canceled, conflict or error.
func waitOutcome(err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.As(err, new(*HeldError)), errors.As(err, new(*PermitsUnavailableError)):
		return "timeout"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	}
	return "error"
}
