package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/client"
)

// result is what an acquire running in a goroutine returned.
type result struct {
	l   *client.Lease
	err error
}

// goAcquire runs acquire in a goroutine; its result arrives on the channel.
func goAcquire(acquire func() (*client.Lease, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := acquire()
		ch <- result{l, err}
	}()
	return ch
}

// wantPending fails the test if the acquire behind ch has returned.
func wantPending(t *testing.T, ch <-chan result, why string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("the waiting acquire returned (lease %v, err %v) %s", r.l != nil, r.err, why)
	default:
	}
}

// wantGranted waits for the acquire behind ch and returns its lease.
func wantGranted(t *testing.T, ch <-chan result) *client.Lease {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("the waiting acquire failed: %v", r.err)
		}
		return r.l
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting acquire never returned")
	}
	return nil
}

// mustLease returns a function that returns the lease it is given, failing
// t on an error: mustLease(t)(rw.TryLock(ctx, opts)). The lease is
// released when t ends (before the server stops: a hold's open stream would
// keep it from closing).
func mustLease(t *testing.T) func(*client.Lease, error) *client.Lease {
	return func(l *client.Lease, err error) *client.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Unlock(context.Background()) })
		return l
	}
}

// wantHeld fails the test unless err is a *HeldError.
func wantHeld(t *testing.T, err error, what string) {
	t.Helper()
	var h *client.HeldError
	if !errors.As(err, &h) || !errors.Is(err, client.ErrHeld) {
		t.Fatalf("%s: err = %v, want a *HeldError", what, err)
	}
}

// Readers share the lock; a writer is refused while they hold it, waits
// for the last of them, and keeps later readers out while it waits. Every
// grant's fence is above the ones before.
func TestRWLockReadersThenWriter(t *testing.T) {
	ctx := t.Context()
	rw := testClient(t).RWLock("catalog")
	r1 := mustLease(t)(rw.TryRLock(ctx, client.LockOptions{TTL: time.Minute}))
	r2 := mustLease(t)(rw.TryRLock(ctx, client.LockOptions{TTL: time.Minute}))
	if r1.Fence <= 0 || r2.Fence <= r1.Fence {
		t.Fatalf("fences %d then %d, want increasing from above 0", r1.Fence, r2.Fence)
	}
	st, err := rw.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Readers != 2 || st.WriteHeld {
		t.Fatalf("status = %+v, want 2 readers and no writer", st)
	}
	_, err = rw.TryLock(ctx, client.LockOptions{})
	wantHeld(t, err, "TryLock while read-held")

	writer := goAcquire(func() (*client.Lease, error) {
		return rw.Lock(ctx, client.LockOptions{TTL: time.Minute, Wait: time.Minute})
	})
	eventually(t, "the writer waits", func() bool {
		st, err := rw.Status(ctx)
		return err == nil && st.Waiters.Write == 1
	})
	_, err = rw.TryRLock(ctx, client.LockOptions{})
	wantHeld(t, err, "TryRLock while a writer waits")

	if err := r1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := rw.Status(ctx); err != nil || st.Readers != 1 || st.WriteHeld {
		t.Fatalf("status = %+v (err %v) after one reader left, want 1 reader and no writer", st, err)
	}
	wantPending(t, writer, "while a reader still holds the lock")

	if err := r2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := wantGranted(t, writer)
	if w.Fence <= r2.Fence {
		t.Fatalf("writer fence %d, want above the readers' %d", w.Fence, r2.Fence)
	}
	if st, err := rw.Status(ctx); err != nil || !st.WriteHeld || st.Readers != 0 {
		t.Fatalf("status = %+v (err %v), want write-held", st, err)
	}
	_, err = rw.TryRLock(ctx, client.LockOptions{})
	wantHeld(t, err, "TryRLock while write-held")
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(w.Err(), client.ErrReleased) {
		t.Fatalf("Err = %v, want ErrReleased", w.Err())
	}
}

// A writer waits for a writer too, and readers queued behind a writer get
// the lock together when it is released.
func TestRWLockWriterExcludesWriter(t *testing.T) {
	ctx := t.Context()
	rw := testClient(t).RWLock("catalog")
	w1 := mustLease(t)(rw.TryLock(ctx, client.LockOptions{TTL: time.Minute}))
	_, err := rw.TryLock(ctx, client.LockOptions{})
	wantHeld(t, err, "second TryLock")
	readers := []<-chan result{}
	for range 2 {
		readers = append(readers, goAcquire(func() (*client.Lease, error) {
			return rw.RLock(ctx, client.LockOptions{TTL: time.Minute, Wait: time.Minute})
		}))
	}
	eventually(t, "both readers wait", func() bool {
		st, err := rw.Status(ctx)
		return err == nil && st.Waiters.Read == 2
	})
	if err := w1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range readers {
		if l := wantGranted(t, r); l.Fence <= w1.Fence {
			t.Fatalf("reader fence %d, want above the writer's %d", l.Fence, w1.Fence)
		}
	}
	if st, err := rw.Status(ctx); err != nil || st.Readers != 2 {
		t.Fatalf("status = %+v (err %v), want 2 readers", st, err)
	}
}

// Downgrade takes the read lease with the write lease's token; once the
// write lease is released, other readers share the lock and writers wait.
func TestRWLockDowngrade(t *testing.T) {
	ctx := t.Context()
	rw := testClient(t).RWLock("catalog")
	w := mustLease(t)(rw.TryLock(ctx, client.LockOptions{TTL: time.Minute}))
	r := mustLease(t)(rw.Downgrade(ctx, w, client.LockOptions{TTL: time.Minute}))
	if r.Fence <= w.Fence || r.Token != w.Token {
		t.Fatalf("read lease fence %d token %q, want above %d with the write lease's token", r.Fence, r.Token, w.Fence)
	}
	_, err := rw.TryRLock(ctx, client.LockOptions{})
	wantHeld(t, err, "TryRLock while the write lease is held")
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Inspect(ctx); err != nil || !st.Owned {
		t.Fatalf("Inspect = %+v (err %v), want the read lease still owned", st, err)
	}
	other := mustLease(t)(rw.TryRLock(ctx, client.LockOptions{TTL: time.Minute}))
	_, err = rw.TryLock(ctx, client.LockOptions{})
	wantHeld(t, err, "TryLock while read-held")
	if _, err := rw.Downgrade(ctx, other, client.LockOptions{}); err == nil {
		t.Fatal("Downgrade of a read lease: nil error")
	}
	for _, l := range []*client.Lease{r, other} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mustLease(t)(rw.TryLock(ctx, client.LockOptions{TTL: time.Minute}))
}

// The token of a read lease asking for the write lease is refused with
// ErrUpgradeNotSupported, at once, and keeps its read lease.
func TestRWLockUpgradeRefused(t *testing.T) {
	ctx := t.Context()
	rw := testClient(t).RWLock("catalog")
	r := mustLease(t)(rw.TryRLock(ctx, client.LockOptions{TTL: time.Minute}))
	_, err := rw.LockWithToken(ctx, r.Token, client.LockOptions{TTL: time.Minute, Wait: time.Minute})
	if !errors.Is(err, client.ErrUpgradeNotSupported) || errors.Is(err, client.ErrHeld) {
		t.Fatalf("err = %v, want ErrUpgradeNotSupported", err)
	}
	if st, err := r.Inspect(ctx); err != nil || !st.Owned {
		t.Fatalf("Inspect = %+v (err %v), want the read lease still owned", st, err)
	}
	if st, err := rw.Status(ctx); err != nil || st.Readers != 1 || st.WriteHeld {
		t.Fatalf("status = %+v (err %v), want 1 reader and no writer", st, err)
	}
}

// Read/write locks are a namespace apart from locks.
func TestRWLockNamespace(t *testing.T) {
	ctx := t.Context()
	c := testClient(t)
	mustLease(t)(c.TryLock(ctx, "catalog", client.LockOptions{TTL: time.Minute}))
	mustLease(t)(c.RWLock("catalog").TryLock(ctx, client.LockOptions{TTL: time.Minute}))
}
