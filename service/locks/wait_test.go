package locks_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// evalCounter counts script calls.
type evalCounter struct {
	*redis.Client
	evals atomic.Int64
}

func (c *evalCounter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c.evals.Add(1)
	return c.Client.EvalSha(ctx, sha, keys, args...)
}

func waitForSvcWaiters(t *testing.T, svc *locks.Service, name string, n int64) {
	t.Helper()
	end := time.Now().Add(10 * time.Second) // a hang guard
	for {
		st, err := svc.Inspect(t.Context(), name, "")
		if err != nil {
			t.Fatal(err)
		}
		if st.Waiters == n {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("waiters = %d, want %d", st.Waiters, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReleaseWakesOneWaiter: a release wakes one waiter of the process, not
// all of them; the others keep waiting without touching Redis. When the
// waiters leave, the subscription is dropped.
func TestReleaseWakesOneWaiter(t *testing.T) {
	_, rdb := newTestRedis(t)
	cc := &evalCounter{Client: rdb}
	svc := mustNew(t, cc, locks.Config{})
	t.Cleanup(func() { _ = svc.Close() })
	holder := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: time.Minute})
	// Subscribed before the waiters try, so none of them tries again when
	// the subscription is confirmed: from the release on, every script call
	// is counted below. The listener is a hold stream's: a release does not
	// wake it instead of a waiter.
	ready, leave := locks.Listen(svc, "orders")
	<-ready

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const n = 3
	type result struct {
		lease locks.Lease
		err   error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			l, err := svc.Acquire(ctx, "orders", locks.AcquireRequest{Wait: 10 * time.Second})
			results <- result{l, err}
		}()
	}
	waitForSvcWaiters(t, svc, "orders", n)
	if ch, l := svc.Subscriptions(); ch != 1 || l != n+1 {
		t.Fatalf("Subscriptions() = %d, %d; want 1 channel, %d listeners", ch, l, n+1)
	}

	before := cc.evals.Load()
	if _, err := svc.Release(t.Context(), "orders", holder.Token); err != nil {
		t.Fatal(err)
	}
	r := <-results
	if r.err != nil || r.lease.Fence <= holder.Fence {
		t.Fatalf("woken waiter: %+v, %v; want a lease with a fence above %d", r.lease, r.err, holder.Fence)
	}
	time.Sleep(100 * time.Millisecond) // room for any other waiter to (wrongly) run
	if got := cc.evals.Load() - before; got != 2 {
		t.Errorf("%d script calls after the release, want 2 (the release and one waiter's attempt)", got)
	}

	cancel()
	for range n - 1 {
		if r := <-results; !errors.Is(r.err, context.Canceled) {
			t.Errorf("cancelled waiter: %v, want context.Canceled", r.err)
		}
	}
	leave()
	if ch, l := svc.Subscriptions(); ch != 0 || l != 0 {
		t.Errorf("Subscriptions() after every waiter left = %d, %d; want 0, 0", ch, l)
	}
	waitForSvcWaiters(t, svc, "orders", 0)
}

// TestWaitBounds: a wait beyond Config.MaxWait, or negative, is invalid.
func TestWaitBounds(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{MaxWait: time.Second})
	for _, wait := range []time.Duration{-time.Millisecond, time.Second + time.Millisecond} {
		var ve *store.ValidationError
		_, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{Wait: wait})
		if !errors.As(err, &ve) || ve.Field != "wait" {
			t.Errorf("wait %s: %v, want a ValidationError on wait", wait, err)
		}
	}
}

// TestHoldRenewsUntilClose: a hold is renewed every ttl/3 until Close,
// which releases it once, however often it is called.
func TestHoldRenewsUntilClose(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	t.Cleanup(func() { _ = svc.Close() })
	h, err := svc.Hold(t.Context(), "orders", locks.AcquireRequest{TTL: 90 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case ev := <-h.Events():
			if ev.Kind != locks.HoldRenewed || ev.Lease.Fence != h.Lease().Fence {
				t.Fatalf("event %+v, want renewed with fence %d", ev, h.Lease().Fence)
			}
		case <-time.After(30 * time.Second): // a hang guard: renewals are due every 30ms
			t.Fatal("no renewal within 30s for a 90ms lease")
		}
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel, err := h.Close(t.Context())
			if err != nil || !rel.Released {
				t.Errorf("Close = %+v, %v; want released", rel, err)
			}
		}()
	}
	wg.Wait()
	if st, _ := svc.Inspect(t.Context(), "orders", ""); st.Held {
		t.Errorf("lock still held after Close")
	}
	if _, ok := <-h.Events(); ok {
		t.Errorf("events still open after Close")
	}
}
