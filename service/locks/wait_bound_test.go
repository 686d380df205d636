package locks_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// stallingStore answers script calls from Redis until stall is set; from
// then on, once passes more calls went through, a script call hangs until
// its context ends (a Redis that stopped answering), and the deadline it was
// given is recorded. Its pub/sub
// connection is dialled through gate when gate is set: until the gate opens,
// SUBSCRIBE cannot be sent.
type stallingStore struct {
	*redis.Client
	stall  atomic.Bool
	passes atomic.Int64  // calls still answered once stall is set
	ps     *redis.Client // the pub/sub connections' client

	mu        sync.Mutex
	deadlines []time.Time // of the stalled calls, in arrival order
	unbounded int         // stalled calls without a deadline
}

func newStallingStore(t *testing.T, rdb *redis.Client, gate <-chan struct{}) *stallingStore {
	t.Helper()
	opts := *rdb.Options()
	if gate != nil {
		opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	s := &stallingStore{Client: rdb, ps: redis.NewClient(&opts)}
	t.Cleanup(func() { _ = s.ps.Close() })
	return s
}

func (s *stallingStore) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if !s.stall.Load() || s.passes.Add(-1) >= 0 {
		return s.Client.EvalSha(ctx, sha, keys, args...)
	}
	s.mu.Lock()
	if d, ok := ctx.Deadline(); ok {
		s.deadlines = append(s.deadlines, d)
	} else {
		s.unbounded++
	}
	s.mu.Unlock()
	<-ctx.Done()
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(ctx.Err())
	return cmd
}

func (s *stallingStore) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return s.ps.Subscribe(ctx, channels...)
}

func (s *stallingStore) stalled() (deadlines []time.Time, unbounded int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.deadlines...), s.unbounded
}

// waitFor polls cond until it holds; the bound is a hang guard only.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestWaitCallsShareTheRequestDeadline: Redis stops answering while a
// request waits. Every Redis call the request makes from then on (its
// attempt, leaving the waiters and the fair queue) is bounded by the
// request's one deadline, its wait plus one Redis timeout, and none gets a
// Redis timeout of its own beyond it: the answer comes by that deadline.
//   - asleep: the stall starts while the waiter sleeps; its last attempt,
//     at the end of the wait, runs until the request's deadline, and no
//     call after it may end later;
//   - first attempt: the stall starts before the first attempt, which ends
//     after one Redis timeout; leaving the waiters then ends by the
//     request's deadline, at most the wait after the attempt's.
func TestWaitCallsShareTheRequestDeadline(t *testing.T) {
	const opTimeout = time.Second
	for _, tc := range []struct {
		name        string
		fair        bool
		stallFirst  bool
		wait        time.Duration
		stalledWant int // calls that stall before the test looks
	}{
		{"asleep/plain", false, false, 200 * time.Millisecond, 1},
		{"asleep/fair", true, false, 200 * time.Millisecond, 1},
		{"first attempt/plain", false, true, 300 * time.Millisecond, 2},
		{"first attempt/fair", true, true, 300 * time.Millisecond, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rdb := newTestRedis(t)
			st := newStallingStore(t, rdb, nil)
			svc := mustNew(t, st, locks.Config{}, store.Config{OpTimeout: opTimeout})
			t.Cleanup(func() { _ = svc.Close() })
			mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: time.Hour, Fair: tc.fair})
			// The subscription is confirmed before the waiter tries: it
			// does not try again for the confirmation.
			ready, leave := locks.Listen(svc, "orders")
			defer leave()
			<-ready

			errc := make(chan error, 1)
			if !tc.stallFirst {
				// The waiter's first attempt is answered and registers
				// it; every call after it stalls, whenever it comes.
				st.passes.Store(1)
			}
			st.stall.Store(true)
			go func() {
				// A token of the caller's: nothing is given back in the
				// background when an attempt fails (see giveBack).
				_, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{Token: locks.NewToken(),
					Wait: tc.wait, Fair: tc.fair})
				errc <- err
			}()
			if err := <-errc; !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("waiting Acquire with Redis stalled = %v, want ErrUnavailable", err)
			}
			waitFor(t, "the request's calls stalled", func() bool {
				d, u := st.stalled()
				return len(d)+u >= tc.stalledWant
			})
			deadlines, unbounded := st.stalled()
			if unbounded > 0 {
				t.Fatalf("%d stalled calls without a deadline; want every call bounded", unbounded)
			}
			limit := deadlines[0] // the last attempt's deadline is the request's
			if tc.stallFirst {
				// The first attempt's deadline is one Redis timeout after
				// it started, the request's the wait after that at most.
				limit = deadlines[0].Add(tc.wait)
			}
			for i, d := range deadlines[1:] {
				if d.After(limit) {
					t.Errorf("stalled call %d ends %s after the request's deadline", i+2, d.Sub(limit))
				}
			}
		})
	}
}

// TestWaitingIsNotHeldUpBySubscribing: while the SUBSCRIBE for one lock
// cannot be sent (its connection does not come up), a waiter for another
// lock joins, takes its free lock and leaves; a waiter of the first lock
// tries at once and gives up when its wait ends. None of them waits for
// Redis's confirmation of a subscription. Once the subscription is made, a
// waiter that tried before it tries again: a release in between, published
// while nobody was subscribed, is not missed.
func TestWaitingIsNotHeldUpBySubscribing(t *testing.T) {
	_, rdb := newTestRedis(t)
	gate := make(chan struct{})
	st := newStallingStore(t, rdb, gate)
	opened := sync.OnceFunc(func() { close(gate) })
	// A SUBSCRIBE may take up to the Redis timeout: longer than the hang
	// guards below.
	svc := mustNew(t, st, locks.Config{MaxWait: time.Hour}, store.Config{OpTimeout: time.Minute})
	t.Cleanup(func() { opened(); _ = svc.Close() })
	holder := mustAcquire(t, svc, "blocked", locks.AcquireRequest{TTL: time.Hour})

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // hang guard
	defer cancel()
	type result struct {
		lease locks.Lease
		err   error
	}
	waiter := make(chan result, 1)
	go func() {
		l, err := svc.Acquire(ctx, "blocked", locks.AcquireRequest{Wait: 30 * time.Minute})
		waiter <- result{l, err}
	}()
	waitForSvcWaiters(t, svc, "blocked", 1)

	other, err := svc.Acquire(ctx, "other", locks.AcquireRequest{Wait: 30 * time.Minute})
	if err != nil {
		t.Fatalf("waiting Acquire of a free lock while another lock's SUBSCRIBE hangs = %v, want it granted at once", err)
	}
	_, err = svc.Acquire(ctx, "blocked", locks.AcquireRequest{Wait: 50 * time.Millisecond})
	var held *locks.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("short wait for the held lock while its SUBSCRIBE hangs = %v, want a HeldError when the wait ends", err)
	}
	if _, err := svc.Release(ctx, "other", other.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate:
		t.Fatal("the gate opened: the test proves nothing")
	default:
	}
	if ch, l := svc.Subscriptions(); ch != 1 || l != 1 {
		t.Errorf("Subscriptions() = %d, %d; want 1 channel, 1 listener (the waiter still waiting)", ch, l)
	}

	// The release is published while nobody is subscribed: the waiter,
	// asleep until the holder's TTL (an hour), only learns of it by trying
	// again once its subscription is confirmed.
	if _, err := svc.Release(ctx, "blocked", holder.Token); err != nil {
		t.Fatal(err)
	}
	opened()
	r := <-waiter
	if r.err != nil || r.lease.Fence <= holder.Fence {
		t.Fatalf("waiter after its subscription was confirmed: %+v, %v; want the lock", r.lease, r.err)
	}
	if _, err := svc.Release(ctx, "blocked", r.lease.Token); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every listener left", func() bool { ch, l := svc.Subscriptions(); return ch == 0 && l == 0 })
}
