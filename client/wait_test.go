package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/client"
)

// A lease granted after a wait longer than its TTL is valid from the
// attempt that granted it, not from the request's send time: a lock, a
// semaphore's permits and a leadership waited for behind a holder that
// released only after twice the waiter's TTL are each granted alive, with
// ValidUntil past the release (the server's waited_ms counted), for every
// primitive the client waits on.
func TestLeaseGrantedAfterAWaitLongerThanItsTTL(t *testing.T) {
	const ttl = 2 * time.Second
	c := testClient(t)
	type primitive struct {
		hold, wait func(ctx context.Context) (*client.Lease, error)
	}
	primitives := map[string]primitive{
		"lock": {
			hold: func(ctx context.Context) (*client.Lease, error) {
				return c.Lock(ctx, "waited", client.LockOptions{TTL: time.Minute})
			},
			wait: func(ctx context.Context) (*client.Lease, error) {
				return c.Lock(ctx, "waited", client.LockOptions{TTL: ttl, Wait: time.Minute})
			},
		},
		"semaphore": {
			hold: func(ctx context.Context) (*client.Lease, error) {
				return c.Semaphore("waited", 1).Acquire(ctx, 1, client.LockOptions{TTL: time.Minute})
			},
			wait: func(ctx context.Context) (*client.Lease, error) {
				return c.Semaphore("waited", 1).Acquire(ctx, 1, client.LockOptions{TTL: ttl, Wait: time.Minute})
			},
		},
		"election": {
			hold: func(ctx context.Context) (*client.Lease, error) {
				return c.Election("waited").Campaign(ctx, "first", client.CampaignOptions{TTL: time.Minute})
			},
			wait: func(ctx context.Context) (*client.Lease, error) {
				return c.Election("waited").Campaign(ctx, "second", client.CampaignOptions{TTL: ttl, Wait: time.Minute})
			},
		},
	}
	for name, p := range primitives {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			holder := mustLease(t)(p.hold(ctx))
			sent := time.Now()
			waiter := goAcquire(func() (*client.Lease, error) { return p.wait(ctx) })
			for time.Now().Before(sent.Add(2 * ttl)) { // the wait outlasts the waiter's TTL
				time.Sleep(10 * time.Millisecond)
			}
			wantPending(t, waiter, "the holder still holds")
			released := time.Now()
			if err := holder.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			var r result
			select {
			case r = <-waiter:
			case <-time.After(time.Minute): // a hang guard
				t.Fatal("the waiter was not granted within a minute of the release")
			}
			l := mustLease(t)(r.l, r.err)
			if !l.ValidUntil().After(released.Add(ttl / 2)) {
				t.Fatalf("ValidUntil %s after the send, the release came %s after it: want the TTL counted from the grant",
					l.ValidUntil().Sub(sent), released.Sub(sent))
			}
			if err := l.Err(); err != nil {
				t.Fatalf("the lease ended at once (%v), want it held", err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock = %v, want the lease released", err)
			}
		})
	}
}
