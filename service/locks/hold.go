package locks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// HoldEventKind names what happened to a held lease.
type HoldEventKind string

// What can happen to a held lease after it was acquired.
const (
	// HoldRenewed: the service extended the lease by its TTL.
	HoldRenewed HoldEventKind = "renewed"
	// HoldLost: the lease is gone; Reason says why. The hold ends.
	HoldLost HoldEventKind = "lost"
	// HoldReleased: the owner released the lease through the API. The hold ends.
	HoldReleased HoldEventKind = "released"
)

// Reasons a held lease is lost.
const (
	// LostExpired: the lease ran out, because renewals failed for longer
	// than its TTL (a store outage) or the store no longer had it.
	LostExpired = "expired"
	// LostForceReleased: an administrator force-released the lock.
	LostForceReleased = "force_released"
)

// HoldEvent is one thing that happened to a held lease.
type HoldEvent struct {
	Kind   HoldEventKind
	Lease  Lease  // HoldRenewed: the renewed lease (without its token)
	Reason string // HoldLost: why
}

// Hold is a lease held for as long as its holder is connected: the service
// renews it every TTL/3 until Close, and reports renewals and the loss of
// the lease as events.
type Hold struct {
	s      *Service
	p      primitive // the lease's primitive
	k      lockKeys  // the lease's keys
	lease  Lease
	l      *listener
	events chan HoldEvent
	cancel context.CancelFunc
	done   chan struct{}
	ended  bool // set by run before done closes: the lease is gone

	closeOnce sync.Once
	released  Released
	closeErr  error
}

// Hold acquires the lock name as Acquire does (waiting up to req.Wait) and
// keeps the lease alive until Close or until it is lost. It listens on the
// lock's channel, so a force-release is reported at once rather than at the
// next renewal. Like Acquire it answers within req.Wait plus one Redis
// timeout (and one more when it renews, below): it waits for Redis to
// confirm the subscription only while that bound allows, and if the
// confirmation comes later the hold re-checks its lease then (a
// force-release in between was not heard). A lease is never handed out
// after it could have expired: one whose TTL may be a third gone by then is
// renewed first (freshen). Returns the errors of Acquire, and ErrHoldLapsed.
func (s *Service) Hold(ctx context.Context, name string, req AcquireRequest) (*Hold, error) {
	return s.hold(ctx, s.mutex, name, req, s.Acquire)
}

// hold is Hold of any primitive p: acquire takes the lease (with p's own
// checks), then the hold keeps it alive with p's renewals.
func (s *Service) hold(ctx context.Context, p primitive, name string, req AcquireRequest,
	acquire func(context.Context, string, AcquireRequest) (Lease, error)) (*Hold, error) {
	// The lease is valid from before the grant's request was sent, by our
	// clock: from before the acquire, as the grant is its last call.
	valid := time.Now()
	deadline := valid.Add(req.Wait + s.opTimeout)
	lease, err := acquire(ctx, name, req)
	if err != nil {
		return nil, err
	}
	k := s.keysIn(ctx, p.kind(), name)
	l, err := s.sub.join(k.channel, true)
	if err == nil {
		err = waitReady(ctx, l, min(time.Until(deadline), s.opTimeout))
		if err == nil {
			lease, valid, err = s.freshen(ctx, p, k, lease, valid)
		}
		if err != nil {
			l.leave(false)
		}
	}
	if err != nil {
		_, rerr := p.release(context.WithoutCancel(ctx), k, lease.Token)
		if errors.Is(rerr, store.ErrNotFound) || errors.Is(rerr, ErrNotOwner) {
			rerr = nil
		}
		return nil, errors.Join(err, rerr)
	}
	hctx, cancel := context.WithCancel(ctx)
	h := &Hold{s: s, p: p, k: k, lease: lease, l: l, events: make(chan HoldEvent, 4), cancel: cancel, done: make(chan struct{})}
	go h.run(hctx, valid)
	return h, nil
}

// ErrHoldLapsed reports a hold whose lease ran out, or may have, before the
// hold could report it acquired: the wait for the lock's subscription and
// the renewal after it took longer than the lease's TTL (a store that
// answers slowly, or a failover). The lease is given back. It wraps
// ErrUnavailable.
var ErrHoldLapsed = fmt.Errorf("%w: the lease ran out before the hold could report it", store.ErrUnavailable)

// freshen makes sure a hold's lease, valid by our clock since valid, is
// reported acquired only while it cannot have expired: when a third of its
// TTL (the renewal interval) has passed since valid, it renews the lease
// first, and the lease is then valid since that renewal was sent. It returns
// the lease to report and when its validity began, or ErrHoldLapsed (the
// renewal found the lease gone, or took longer than the TTL) or the
// renewal's store error. A lease reported acquired is so renewed by run
// within two renewal intervals, before its TTL ends.
func (s *Service) freshen(ctx context.Context, p primitive, k lockKeys, lease Lease, valid time.Time) (Lease, time.Time, error) {
	if time.Since(valid) < RenewInterval(lease.TTL) {
		return lease, valid, nil
	}
	sent := time.Now()
	renewed, err := p.renew(ctx, k, lease.Token, 0)
	switch {
	case errors.Is(err, store.ErrNotFound) || errors.Is(err, ErrNotOwner):
		return lease, valid, ErrHoldLapsed
	case err != nil:
		return lease, valid, err
	case time.Since(sent) >= renewed.TTL:
		return lease, valid, ErrHoldLapsed
	}
	lease.TTL, lease.ExpiresAt = renewed.TTL, renewed.ExpiresAt
	s.setPlace(ctx, k, lease.Token, leaseLasts(renewed))
	return lease, sent, nil
}

// waitReady waits up to d for l's subscription to be confirmed. It returns
// ctx's error if ctx ends first, and nil otherwise, confirmed or not.
func waitReady(ctx context.Context, l *listener, d time.Duration) error {
	if d <= 0 || isClosed(l.Ready()) {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.Ready():
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Lease is the lease as acquired, token included.
func (h *Hold) Lease() Lease { return h.lease }

// Events delivers renewals and the end of the lease. It is closed when the
// hold stops renewing: after a HoldLost or HoldReleased event, or on Close.
func (h *Hold) Events() <-chan HoldEvent { return h.events }

// RenewInterval is how often a lease of the given TTL is renewed: TTL/3.
func RenewInterval(ttl time.Duration) time.Duration { return max(ttl/3, time.Millisecond) }

// run renews the lease, valid by our clock since valid, every TTL/3, and at
// once on a wake-up hint (a
// release or force-release of this lock, or a renew through the API that
// shortened the lease; not a grant's notice, nor a waiter that left), until
// ctx ends or the lease is gone. Each renewal
// keeps the lease's own TTL, which a renew through the API may have changed:
// the next one is due a third of that TTL later.
func (h *Hold) run(ctx context.Context, valid time.Time) {
	defer close(h.done)
	defer close(h.events)
	tick := time.NewTicker(RenewInterval(h.lease.TTL))
	defer tick.Stop()
	expires := valid.Add(h.lease.TTL) // by our clock: no renewal, no lease
	ready := h.l.Ready()              // nil once the subscription is confirmed
	if isClosed(ready) {
		ready = nil
	}
	for {
		hint := ""
		select {
		case <-ctx.Done():
			return
		case <-ready: // confirmed late: a force-release before it was not heard
			ready = nil
		case <-tick.C:
		case hint = <-h.l.C():
			// a semaphore's hints say how many permits are free: "released:3"
			hint, _, _ = strings.Cut(hint, ":")
			if hint == hintLeft || hint == hintAcquired {
				// A grant ends no lease: another reader's or another
				// semaphore lease's leaves this one as it was, and the
				// lock's own is granted only once this one is gone (its
				// renewals find that out).
				continue
			}
		}
		sent := time.Now()
		lease, err := h.p.renew(ctx, h.k, h.lease.Token, 0)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			expires = sent.Add(lease.TTL)
			tick.Reset(RenewInterval(lease.TTL))
			h.s.setPlace(ctx, h.k, h.lease.Token, leaseLasts(lease))
		}
		recorded := ""
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, ErrNotOwner) {
			recorded = h.recordedLoss(ctx)
		}
		kind, reason := holdOutcome(err, hint, recorded, time.Now().After(expires))
		if kind == "" {
			continue
		}
		ev := HoldEvent{Kind: kind, Lease: lease, Reason: reason}
		if kind != HoldRenewed {
			h.ended = true
		}
		select {
		case h.events <- ev:
		case <-ctx.Done():
			return
		}
		if h.ended {
			return
		}
	}
}

// recordedLoss is the reason the store recorded for the loss of the hold's
// lease (a force-release, for one), or "" when none is known.
func (h *Hold) recordedLoss(ctx context.Context) string {
	return h.p.lostReason(ctx, h.k, h.lease.Token)
}

// holdOutcome decides what one renewal means for a hold: a renewed lease
// goes on; a lease the store no longer has (gone, or already taken by a
// waiter) is lost, for the reason the store recorded if any (or, right
// after the owner's own release of a lease that had not run out, released);
// a store error is survived until the lease's TTL has passed without a
// renewal. hint is the wake-up that caused the renewal ("" for the timer);
// expired says the lease's TTL has passed since the last renewal, by the
// service's clock. An empty kind means "keep going". It is the one place
// that names why a hold ends.
func holdOutcome(err error, hint, recorded string, expired bool) (kind HoldEventKind, reason string) {
	gone := errors.Is(err, store.ErrNotFound) || errors.Is(err, ErrNotOwner)
	switch {
	case err == nil:
		return HoldRenewed, ""
	case gone && recorded != "":
		return HoldLost, recorded
	case gone && (hint == hintReleased || hint == hintDrained) && !expired:
		// A release deletes the lease's loss reason, and a waiter may take
		// the lock before this renewal: the release was the owner's.
		return HoldReleased, ""
	case gone && hint == hintForced:
		return HoldLost, LostForceReleased
	case gone, expired:
		return HoldLost, LostExpired
	}
	return "", ""
}

// Close ends the hold: it stops the renewals and, unless the lease is
// already gone, releases one hold of it (which wakes the lock's waiters). It
// works after ctx was cancelled (the client went away): the release runs
// detached from ctx's cancellation, bounded by the store timeout. Calling it
// again returns the first result. Returns the errors of Release; a lease
// that is already gone is not an error.
func (h *Hold) Close(ctx context.Context) (Released, error) {
	h.closeOnce.Do(func() {
		h.cancel()
		<-h.done
		dctx := context.WithoutCancel(ctx)
		h.l.leave(false)
		if h.ended {
			h.s.dropPlace(dctx, h.k, h.lease.Token)
			return
		}
		h.released, h.closeErr = h.p.release(dctx, h.k, h.lease.Token)
		if errors.Is(h.closeErr, store.ErrNotFound) || errors.Is(h.closeErr, ErrNotOwner) {
			h.closeErr = nil
		}
	})
	return h.released, h.closeErr
}
