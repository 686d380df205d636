package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/client"
)

// Leases share the permits up to the capacity; the next try is refused, a
// waiter for more permits than are free waits until enough are released,
// and every grant's fence is above the ones before.
func TestSemaphorePermits(t *testing.T) {
	ctx := t.Context()
	s := testClient(t).Semaphore("jobs", 3)
	a := mustLease(t)(s.TryAcquire(ctx, 2, client.LockOptions{TTL: time.Minute}))
	b := mustLease(t)(s.TryAcquire(ctx, 1, client.LockOptions{TTL: time.Minute}))
	if a.Fence <= 0 || b.Fence <= a.Fence {
		t.Fatalf("fences %d then %d, want increasing from above 0", a.Fence, b.Fence)
	}
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Permits != 3 || st.InUse != 3 || st.Available != 0 || st.Holders != 2 {
		t.Fatalf("status = %+v, want 3 of 3 permits in use by 2 holders", st)
	}
	_, err = s.TryAcquire(ctx, 1, client.LockOptions{})
	wantHeld(t, err, "TryAcquire with no permit free")

	waiter := goAcquire(func() (*client.Lease, error) {
		return s.Acquire(ctx, 2, client.LockOptions{TTL: time.Minute, Wait: time.Minute})
	})
	eventually(t, "the acquire of 2 waits", func() bool {
		st, err := s.Status(ctx)
		return err == nil && st.Waiters == 1
	})
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Status(ctx); err != nil || st.Available != 1 {
		t.Fatalf("status = %+v (err %v) after 1 permit was released, want 1 available", st, err)
	}
	wantPending(t, waiter, "with only 1 of the 2 permits it waits for free")

	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := wantGranted(t, waiter)
	if w.Fence <= b.Fence {
		t.Fatalf("fence %d, want above %d", w.Fence, b.Fence)
	}
	if st, err := s.Status(ctx); err != nil || st.InUse != 2 || st.Available != 1 {
		t.Fatalf("status = %+v (err %v), want 2 in use and 1 available", st, err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(w.Err(), client.ErrReleased) {
		t.Fatalf("Err = %v, want ErrReleased", w.Err())
	}
	if st, err := s.Status(ctx); err != nil || st.InUse != 0 || st.Available != 3 {
		t.Fatalf("status = %+v (err %v), want every permit free", st, err)
	}
}

// A semaphore asked for with another capacity is refused with a
// *PermitsMismatchError naming the capacity it has; more permits than the
// capacity is an invalid request.
func TestSemaphorePermitsMismatch(t *testing.T) {
	ctx := t.Context()
	c := testClient(t)
	mustLease(t)(c.Semaphore("jobs", 3).TryAcquire(ctx, 1, client.LockOptions{TTL: time.Minute}))
	_, err := c.Semaphore("jobs", 5).TryAcquire(ctx, 1, client.LockOptions{})
	var pm *client.PermitsMismatchError
	if !errors.As(err, &pm) || !errors.Is(err, client.ErrPermitsMismatch) || pm.Permits != 3 {
		t.Fatalf("err = %v, want a *PermitsMismatchError naming 3 permits", err)
	}
	_, err = c.Semaphore("jobs", 3).TryAcquire(ctx, 4, client.LockOptions{})
	if !errors.Is(err, client.ErrInvalidRequest) {
		t.Fatalf("4 of 3 permits: err = %v, want ErrInvalidRequest", err)
	}
}

// Held and kept-alive leases of read/write locks and semaphores outlive
// their TTL: the lease is still owned, by the server's account, once the
// TTL it was granted with has passed several times over; and a released
// hold frees the resource.
func TestHoldPastTTL(t *testing.T) {
	// Renewed every TTL/3, a lease survives a renewal late by 2/3 of its
	// TTL: with these, over 600ms on a busy machine.
	const holdTTL = time.Second
	const keepAliveTTL = 2 * time.Second
	c := testClient(t)
	sem := c.Semaphore("uploads", 2)
	rw := c.RWLock("catalog")
	tests := []struct {
		name    string
		ttl     time.Duration
		acquire func(context.Context, time.Duration) (*client.Lease, error)
		// taken is whether another acquire is refused now.
		taken func(context.Context, *testing.T) bool
	}{
		{"semaphore hold", holdTTL, func(ctx context.Context, ttl time.Duration) (*client.Lease, error) {
			return sem.Hold(ctx, 2, client.HoldOptions{TTL: ttl})
		}, func(ctx context.Context, t *testing.T) bool {
			return refused(ctx, t, func() (*client.Lease, error) { return sem.TryAcquire(ctx, 1, client.LockOptions{}) })
		}},
		{"semaphore keep-alive", keepAliveTTL, func(ctx context.Context, ttl time.Duration) (*client.Lease, error) {
			return sem.Acquire(ctx, 2, client.LockOptions{TTL: ttl, KeepAlive: true})
		}, func(ctx context.Context, t *testing.T) bool {
			return refused(ctx, t, func() (*client.Lease, error) { return sem.TryAcquire(ctx, 1, client.LockOptions{}) })
		}},
		{"write hold", holdTTL, func(ctx context.Context, ttl time.Duration) (*client.Lease, error) {
			return rw.Hold(ctx, client.HoldOptions{TTL: ttl})
		}, func(ctx context.Context, t *testing.T) bool {
			return refused(ctx, t, func() (*client.Lease, error) { return rw.TryRLock(ctx, client.LockOptions{}) })
		}},
		{"read hold", holdTTL, func(ctx context.Context, ttl time.Duration) (*client.Lease, error) {
			return rw.RHold(ctx, client.HoldOptions{TTL: ttl})
		}, func(ctx context.Context, t *testing.T) bool {
			return refused(ctx, t, func() (*client.Lease, error) { return rw.TryLock(ctx, client.LockOptions{}) })
		}},
		{"read keep-alive", keepAliveTTL, func(ctx context.Context, ttl time.Duration) (*client.Lease, error) {
			return rw.RLock(ctx, client.LockOptions{TTL: ttl, KeepAlive: true})
		}, func(ctx context.Context, t *testing.T) bool {
			return refused(ctx, t, func() (*client.Lease, error) { return rw.TryLock(ctx, client.LockOptions{}) })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			l := mustLease(t)(tt.acquire(ctx, tt.ttl))
			first := l.ValidUntil()
			// Wait until the TTL granted has passed three times over, as
			// the client's clock counts it.
			for time.Now().Before(first.Add(2 * tt.ttl)) {
				select {
				case <-l.Done():
					t.Fatalf("the lease ended: %v", l.Err())
				case <-time.After(10 * time.Millisecond):
				}
			}
			if st, err := l.Inspect(ctx); err != nil || !st.Owned {
				t.Fatalf("Inspect = %+v (err %v), want the lease owned past its TTL", st, err)
			}
			if !l.ValidUntil().After(first) {
				t.Fatalf("ValidUntil %v never moved past the first %v", l.ValidUntil(), first)
			}
			if !tt.taken(ctx, t) {
				t.Fatal("another acquire was granted while the lease is held")
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			<-l.Done()
			if !errors.Is(l.Err(), client.ErrReleased) {
				t.Fatalf("Err = %v, want ErrReleased", l.Err())
			}
			if tt.taken(ctx, t) {
				t.Fatal("still taken after the release")
			}
		})
	}
}

// refused says whether acquire was refused as held; a lease it was granted
// is released.
func refused(ctx context.Context, t *testing.T, acquire func() (*client.Lease, error)) bool {
	t.Helper()
	l, err := acquire()
	if err == nil {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		return false
	}
	if !errors.Is(err, client.ErrHeld) {
		t.Fatalf("err = %v, want a lease or ErrHeld", err)
	}
	return true
}

// The control of TestHoldPastTTL: on the same store clock, a lease that is
// neither held nor kept alive has ended once its TTL has passed, and its
// permits are free.
func TestSemaphoreLeaseExpires(t *testing.T) {
	ctx := t.Context()
	sem := testClient(t).Semaphore("uploads", 2)
	l := mustLease(t)(sem.TryAcquire(ctx, 2, client.LockOptions{TTL: 300 * time.Millisecond}))
	<-l.Done()
	var lost *client.LostError
	if !errors.As(l.Err(), &lost) || lost.Reason != client.ReasonValidityElapsed {
		t.Fatalf("Err = %v, want lost with %s", l.Err(), client.ReasonValidityElapsed)
	}
	eventually(t, "the server frees the permits", func() bool {
		st, err := l.Inspect(ctx)
		return err == nil && !st.Owned
	})
	mustLease(t)(sem.TryAcquire(ctx, 2, client.LockOptions{TTL: time.Minute}))
}

// A force-release ends every lease of a semaphore or read/write lock: held
// leases learn it from their stream, with the server's reason.
func TestForceReleaseEndsHolds(t *testing.T) {
	ctx := t.Context()
	c := testClient(t, client.WithAPIKey(exampleAdminKey))
	sem := c.Semaphore("uploads", 3)
	rw := c.RWLock("catalog")
	tests := []struct {
		name    string
		holds   []func() (*client.Lease, error)
		release func() error
	}{
		{"semaphore", []func() (*client.Lease, error){
			func() (*client.Lease, error) { return sem.Hold(ctx, 2, client.HoldOptions{TTL: time.Minute}) },
			func() (*client.Lease, error) { return sem.Hold(ctx, 1, client.HoldOptions{TTL: time.Minute}) },
		}, func() error { return sem.ForceRelease(ctx) }},
		{"read/write lock", []func() (*client.Lease, error){
			func() (*client.Lease, error) { return rw.RHold(ctx, client.HoldOptions{TTL: time.Minute}) },
			func() (*client.Lease, error) { return rw.RHold(ctx, client.HoldOptions{TTL: time.Minute}) },
		}, func() error { return rw.ForceRelease(ctx) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var leases []*client.Lease
			for _, hold := range tt.holds {
				leases = append(leases, mustLease(t)(hold()))
			}
			if err := tt.release(); err != nil {
				t.Fatal(err)
			}
			for _, l := range leases {
				select {
				case <-l.Done():
				case <-time.After(30 * time.Second):
					t.Fatal("a held lease never learnt it was force-released")
				}
				var lost *client.LostError
				if !errors.As(l.Err(), &lost) || lost.Reason != client.ReasonForceReleased {
					t.Fatalf("Err = %v, want lost with %s", l.Err(), client.ReasonForceReleased)
				}
			}
		})
	}
}

// SetPermits changes the capacity: the handle that changed it asks with the
// new one, leases granted keep their permits, and a handle with the old
// capacity is refused naming the new one.
func TestSemaphoreSetPermits(t *testing.T) {
	ctx := t.Context()
	c := testClient(t, client.WithAPIKey(exampleAdminKey))
	s := c.Semaphore("jobs", 3)
	mustLease(t)(s.TryAcquire(ctx, 2, client.LockOptions{TTL: time.Minute}))
	st, err := s.SetPermits(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if st.Permits != 5 || st.InUse != 2 || st.Available != 3 {
		t.Fatalf("state = %+v, want 2 of 5 permits in use", st)
	}
	mustLease(t)(s.TryAcquire(ctx, 3, client.LockOptions{TTL: time.Minute}))
	_, err = c.Semaphore("jobs", 3).TryAcquire(ctx, 1, client.LockOptions{})
	var pm *client.PermitsMismatchError
	if !errors.As(err, &pm) || pm.Permits != 5 {
		t.Fatalf("err = %v, want a *PermitsMismatchError naming 5 permits", err)
	}
	// A server checks the admin credential first, whatever the semaphore.
	_, err = testClient(t).Semaphore("jobs", 3).SetPermits(ctx, 4)
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != 403 {
		t.Fatalf("without the admin key: err = %v, want a 403 *Problem", err)
	}
}
