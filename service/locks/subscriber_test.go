package locks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// TestWaitAfterAFailedSubscribe: a waiter whose subscription could not be
// sent (the store was down) and that gave up before the store came back
// leaves nothing behind, so a later waiter on the same lock is not held up
// waiting for a confirmation that will never come: it takes a free lock at
// once.
func TestWaitAfterAFailedSubscribe(t *testing.T) {
	m, rdb := newTestRedis(t)
	// A wait for the subscription is bounded by OpTimeout and the wait: both
	// far longer than the hang guard below.
	svc := mustNew(t, rdb, locks.Config{MaxWait: time.Minute}, store.Config{OpTimeout: time.Minute})
	t.Cleanup(func() { _ = svc.Close() })

	m.Close()
	_, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{Wait: 100 * time.Millisecond})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("waiting Acquire while the store is down = %v, want ErrUnavailable", err)
	}
	if err := m.Restart(); err != nil {
		t.Fatalf("restart miniredis: %v", err)
	}

	for i := range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // hang guard
		l, err := svc.Acquire(ctx, "orders", locks.AcquireRequest{Wait: 30 * time.Second})
		cancel()
		if err != nil {
			t.Fatalf("waiting Acquire %d of a free lock after the store came back = %v, want it granted at once", i+1, err)
		}
		if _, err := svc.Release(t.Context(), "orders", l.Token); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}
