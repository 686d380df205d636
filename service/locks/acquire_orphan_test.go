package locks_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

var acquireSHA = storetest.ScriptSHA(lua.Source("acquire"))

// lostReplyClient runs every script for real, then lets a test replace the
// acquire script's reply with an error: the script ran, its caller never
// learns how.
type lostReplyClient struct {
	*redis.Client
	// lose runs after the acquire script; a non-nil error is what the
	// caller gets instead of the reply.
	lose func(ctx context.Context) error
}

func (c *lostReplyClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha != acquireSHA || c.lose == nil {
		return c.Client.EvalSha(ctx, sha, keys, args...)
	}
	cmd := c.Client.EvalSha(context.WithoutCancel(ctx), sha, keys, args...)
	if err := c.lose(ctx); err != nil {
		out := redis.NewCmd(ctx)
		out.SetErr(err)
		return out
	}
	return cmd
}

// readTimeout is the error go-redis returns when a reply does not come in time.
var readTimeout = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

func newLostReplyService(t *testing.T) (*locks.Service, *lostReplyClient) {
	t.Helper()
	_, rdb := newTestRedis(t)
	c := &lostReplyClient{Client: rdb}
	return mustNew(t, c, locks.Config{}, store.Config{KeyPrefix: "lk:"}), c
}

// wantNoLease polls until name is free and no keep-alive lease is
// registered (the lease is given back in the background), failing t when
// that does not happen long before the lease would expire.
func wantNoLease(t *testing.T, svc *locks.Service, c *lostReplyClient, name string) {
	t.Helper()
	c.lose = nil
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := mustInspect(t, svc, name, "")
		n, err := c.ZCard(t.Context(), "lk:keepalive").Result()
		if err != nil {
			t.Fatal(err)
		}
		if !st.Held && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is held (%+v, %d keep-alive entries) after an acquire that reported failure: "+
				"nobody knows the token", name, st, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An acquire whose reply is lost (a timeout after the script ran) reports
// ErrUnavailable and gives back the lease it may have been granted, so no
// lease, kept alive or not, lives on under a token nobody received.
func TestAcquireLostReplyGivesTheLeaseBack(t *testing.T) {
	tests := []struct {
		desc string
		req  locks.AcquireRequest
	}{
		{"try once", locks.AcquireRequest{TTL: time.Minute}},
		{"keep-alive", locks.AcquireRequest{TTL: time.Minute, Keepalive: true}},
		{"waiting", locks.AcquireRequest{TTL: time.Minute, Wait: time.Second}},
		{"waiting keep-alive", locks.AcquireRequest{TTL: time.Minute, Wait: time.Second, Keepalive: true}},
		{"fair", locks.AcquireRequest{TTL: time.Minute, Wait: time.Second, Fair: true}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			svc, c := newLostReplyService(t)
			c.lose = func(context.Context) error { return readTimeout }
			_, err := svc.Acquire(t.Context(), "orders", tt.req)
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("Acquire = %v, want ErrUnavailable", err)
			}
			wantNoLease(t, svc, c, "orders")
		})
	}
}

// A client that goes away while the acquire script runs gets its context's
// error, and the lease the script granted is given back.
func TestAcquireCancelledMidScriptGivesTheLeaseBack(t *testing.T) {
	for _, keepalive := range []bool{false, true} {
		svc, c := newLostReplyService(t)
		ctx, cancel := context.WithCancel(t.Context())
		c.lose = func(ctx context.Context) error {
			cancel() // the client disconnects while Redis runs the script
			return ctx.Err()
		}
		_, err := svc.Acquire(ctx, "orders", locks.AcquireRequest{TTL: time.Minute, Keepalive: keepalive})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("keepalive %v: Acquire = %v, want context.Canceled", keepalive, err)
		}
		wantNoLease(t, svc, c, "orders")
	}
}

// A token the client chose may already hold the lock: whether the lost
// re-entry ran cannot be told, and releasing blindly could free a lock the
// client holds. Its holds stay; the client knows its token and releases.
func TestAcquireLostReplyKeepsAClientTokensHolds(t *testing.T) {
	for _, wait := range []time.Duration{0, time.Second} {
		svc, c := newLostReplyService(t)
		mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA, TTL: time.Minute})
		c.lose = func(context.Context) error { return readTimeout }
		_, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{Token: tokenA, Wait: wait})
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("wait %s: re-entry = %v, want ErrUnavailable", wait, err)
		}
		c.lose = nil
		if st := mustInspect(t, svc, "orders", tokenA); !st.Owned || st.HoldCount != 2 {
			t.Errorf("wait %s: after a lost re-entry: %+v, want owned by the client with both holds", wait, st)
		}
	}
}

// A fair waiter whose first attempt's reply is lost was queued by that
// attempt all the same: it leaves the queue at once, or the fair lock would
// wait for a waiter that is gone until its deadline.
func TestFairWaiterWithALostReplyLeavesTheQueue(t *testing.T) {
	svc, c := newLostReplyService(t)
	if _, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{TTL: time.Minute, Fair: true}); err != nil {
		t.Fatalf("holder: %v", err)
	}
	var queuedByTheLostAttempt int64
	c.lose = func(ctx context.Context) error {
		n, err := c.LLen(ctx, "lk:queue:{orders}").Result()
		if err != nil {
			return err
		}
		queuedByTheLostAttempt = n
		return readTimeout
	}
	_, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{TTL: time.Minute, Wait: time.Minute, Fair: true})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("waiting Acquire = %v, want ErrUnavailable", err)
	}
	if queuedByTheLostAttempt != 1 {
		t.Fatalf("the lost attempt queued %d waiters, want 1: the test proves nothing", queuedByTheLostAttempt)
	}
	c.lose = nil
	// The caller is answered at once; its leaving runs behind the answer.
	// The waiter's queue entry would stay until its deadline, a minute away:
	// emptied well before that, it was the leave.
	var n int64
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if n, err = c.LLen(t.Context(), "lk:queue:{orders}").Result(); err != nil || n == 0 {
			break
		}
	}
	if err != nil || n != 0 {
		t.Errorf("fair queue after the waiter's failed acquire = %d, %v; want empty", n, err)
	}
}
