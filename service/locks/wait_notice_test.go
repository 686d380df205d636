package locks_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// deafClient is a client whose pub/sub connection goes to a server that
// never answers: its waiters hear nothing and only re-check on their timers.
type deafClient struct {
	store.Client
	silent *redis.Client
}

func (c deafClient) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return c.silent.Subscribe(ctx, channels...)
}

// queuedPrimitive is one primitive's side of the queued-waiter test: a
// waiter behind another is told to re-check at that waiter's deadline
// while the name is free (a fair lock's queue, a read/write lock's queued
// writer, a fair semaphore's queue).
type queuedPrimitive struct {
	tag string // the kind's tag, as KeysOfKind takes it
	// acquire takes the name for req (a semaphore: 1 of 1 permits) and
	// returns the lease's fence.
	acquire func(ctx context.Context, svc *locks.Service, req locks.AcquireRequest) (int64, error)
	release func(ctx context.Context, svc *locks.Service, token string) error
	// shorten makes token's lease end after ttl: a re-entry, whose notice
	// says so, or a semaphore's renewal, which wakes the waiters.
	shorten func(ctx context.Context, svc *locks.Service, token string, ttl time.Duration) error
	waiters func(ctx context.Context, svc *locks.Service) (int64, error)
}

const (
	queuedName = "orders"
	tokenC     = "token-c-0123456789abcdef"
)

var queuedPrimitives = map[string]queuedPrimitive{
	"lock": {
		tag: "",
		acquire: func(ctx context.Context, svc *locks.Service, req locks.AcquireRequest) (int64, error) {
			req.Fair = true
			l, err := svc.Acquire(ctx, queuedName, req)
			return l.Fence, err
		},
		release: func(ctx context.Context, svc *locks.Service, token string) error {
			_, err := svc.Release(ctx, queuedName, token)
			return err
		},
		shorten: func(ctx context.Context, svc *locks.Service, token string, ttl time.Duration) error {
			_, err := svc.Acquire(ctx, queuedName, locks.AcquireRequest{Token: token, TTL: ttl, Fair: true})
			return err
		},
		waiters: func(ctx context.Context, svc *locks.Service) (int64, error) {
			st, err := svc.Inspect(ctx, queuedName, "")
			return st.Waiters, err
		},
	},
	"rwlock writer": {
		tag: "rw",
		acquire: func(ctx context.Context, svc *locks.Service, req locks.AcquireRequest) (int64, error) {
			req.Mode = locks.ModeWrite
			l, err := svc.AcquireRW(ctx, queuedName, req)
			return l.Fence, err
		},
		release: func(ctx context.Context, svc *locks.Service, token string) error {
			_, err := svc.ReleaseRW(ctx, queuedName, token, locks.ModeWrite)
			return err
		},
		shorten: func(ctx context.Context, svc *locks.Service, token string, ttl time.Duration) error {
			_, err := svc.AcquireRW(ctx, queuedName, locks.AcquireRequest{Token: token, TTL: ttl, Mode: locks.ModeWrite})
			return err
		},
		waiters: func(ctx context.Context, svc *locks.Service) (int64, error) {
			st, err := svc.InspectRW(ctx, queuedName, "")
			return st.WaitingWriters, err
		},
	},
	"semaphore": {
		tag: "sem",
		acquire: func(ctx context.Context, svc *locks.Service, req locks.AcquireRequest) (int64, error) {
			req.Fair = true
			l, err := svc.AcquireSemaphore(ctx, queuedName, locks.SemaphoreRequest{AcquireRequest: req, Permits: 1})
			return l.Fence, err
		},
		release: func(ctx context.Context, svc *locks.Service, token string) error {
			_, err := svc.ReleaseSemaphore(ctx, queuedName, token)
			return err
		},
		shorten: func(ctx context.Context, svc *locks.Service, token string, ttl time.Duration) error {
			_, err := svc.RenewSemaphore(ctx, queuedName, token, ttl)
			return err
		},
		waiters: func(ctx context.Context, svc *locks.Service) (int64, error) {
			st, err := svc.InspectSemaphore(ctx, queuedName, "")
			return st.Waiters, err
		},
	},
}

// TestQueuedWaiterRechecksWhenTheLeaseAheadEnds: waiter B is queued behind
// waiter A, who hears nothing. When the holder releases, B would re-check
// at A's deadline (the name is free, A goes first), but a wait re-checks at
// least every QueueRenew, renewing its registration. A is then granted a
// lease shorter than that: its notice brings B's re-check forward to that
// lease's end (its TTL and the millisecond margin), with no call to Redis. Once that lease, shortened, has expired
// unreleased (which publishes nothing), B's re-check at its end grants B
// the name.
func TestQueuedWaiterRechecksWhenTheLeaseAheadEnds(t *testing.T) {
	for desc, p := range queuedPrimitives {
		t.Run(desc, func(t *testing.T) {
			t.Parallel()
			m, rdb := newTestRedis(t)
			now := t0
			cc := &evalCounter{Client: rdb}
			svc := mustNew(t, cc, locks.Config{})
			t.Cleanup(func() { _ = svc.Close() })
			rechecks := locks.TraceRechecks(svc)
			silent := redis.NewClient(&redis.Options{Addr: storetest.SilentRedis(t), MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = silent.Close() })
			deaf := mustNew(t, deafClient{Client: rdb, silent: silent}, locks.Config{})
			t.Cleanup(func() { _ = deaf.Close() })
			ctx := t.Context()

			// B's channel is subscribed before B waits, so B makes no
			// attempt for its subscription's confirmation.
			ready, leave := locks.ListenKind(svc, p.tag, queuedName)
			t.Cleanup(leave)
			<-ready
			if _, err := p.acquire(ctx, svc, locks.AcquireRequest{Token: tokenC, TTL: time.Minute}); err != nil {
				t.Fatalf("the holder's acquire: %v", err)
			}
			waitersAre := func(n int64) {
				t.Helper()
				waitFor(t, "the waiters are counted", func() bool {
					got, err := p.waiters(ctx, svc)
					return err == nil && got == n
				})
			}
			aCtx, stopA := context.WithCancel(ctx)
			aDone := make(chan struct{})
			go func() {
				defer close(aDone)
				_, _ = p.acquire(aCtx, deaf, locks.AcquireRequest{Token: tokenA, TTL: time.Minute, Wait: 50 * time.Second})
			}()
			t.Cleanup(func() { stopA(); <-aDone })
			waitersAre(1)
			type result struct {
				fence int64
				err   error
			}
			bDone := make(chan result, 1)
			go func() {
				f, err := p.acquire(ctx, svc, locks.AcquireRequest{Token: tokenB, TTL: time.Minute, Wait: 50 * time.Second})
				bDone <- result{f, err}
			}()
			waitersAre(2)
			next := func(what string) locks.Recheck {
				t.Helper()
				select {
				case r := <-rechecks:
					return r
				case <-time.After(time.Minute): // a hang guard
					t.Fatalf("no re-check set within a minute: want %s", what)
					return locks.Recheck{}
				}
			}
			next("B's first, behind the holder")

			if err := p.release(ctx, svc, tokenC); err != nil {
				t.Fatalf("the holder's release: %v", err)
			}
			if r, want := next("B's after the release"), (locks.Recheck{After: locks.QueueRenew}); r != want {
				t.Fatalf("B's re-check after the release = %+v, want %+v: set by its attempt, A's deadline (%s ahead) capped at the registration's renewal", r, want, locks.QueueHold)
			}

			// A is granted its lease, as from another process.
			before := cc.evals.Load()
			fenceA, err := p.acquire(ctx, deaf, locks.AcquireRequest{Token: tokenA, TTL: locks.QueueRenew / 2})
			if err != nil {
				t.Fatalf("A's grant: %v", err)
			}
			if r, want := next("B's on A's grant"), (locks.Recheck{After: locks.QueueRenew/2 + time.Millisecond, ByNotice: true}); r != want {
				t.Fatalf("B's re-check on A's grant = %+v, want %+v: the end of A's lease, from its notice", r, want)
			}
			time.Sleep(100 * time.Millisecond) // room for a wrong attempt to show
			if got := cc.evals.Load() - before; got != 0 {
				t.Errorf("B made %d script calls on hearing A's grant, want none", got)
			}
			select {
			case r := <-rechecks:
				t.Errorf("B set another re-check (%+v) on hearing A's grant: it made an attempt", r)
			default:
			}

			// A's lease is shortened, then expires without a release.
			if err := p.shorten(ctx, deaf, tokenA, 200*time.Millisecond); err != nil {
				t.Fatalf("A's lease shortened: %v", err)
			}
			if r := next("B's on A's shorter lease"); r.After > 200*time.Millisecond+time.Millisecond {
				t.Fatalf("B's re-check after A's lease was shortened = %+v, want at most its end", r)
			}
			advance(m, &now, 200*time.Millisecond+time.Millisecond)
			select {
			case r := <-bDone:
				if r.err != nil || r.fence <= fenceA {
					t.Fatalf("B = fence %d, %v; want a grant above A's fence %d", r.fence, r.err, fenceA)
				}
			case <-time.After(time.Minute): // a hang guard; B's wait is shorter
				t.Fatal("B was not granted within a minute")
			}
		})
	}
}

// TestEveryGrantPublishesItsNotice: every grant of a read/write lock (read
// or write, new or a re-entry) and of a semaphore publishes its notice on
// the name's channel, the lease's fence and TTL (a semaphore's with the
// permits left free); a refused attempt publishes nothing. (The exclusive
// lock's are TestWakeUps'.)
func TestEveryGrantPublishesItsNotice(t *testing.T) {
	_, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, locks.Config{})
	ctx := t.Context()
	sub := rdb.PSubscribe(ctx, "*")
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}

	r := mustAcquireRW(t, svc, "orders", locks.AcquireRequest{Token: tokenA, Mode: locks.ModeRead, TTL: 5 * time.Second})
	mustAcquireRW(t, svc, "orders", locks.AcquireRequest{Token: tokenA, Mode: locks.ModeRead, TTL: 3 * time.Second})
	if _, err := svc.AcquireRW(ctx, "orders", locks.AcquireRequest{Token: tokenB, Mode: locks.ModeWrite}); err == nil {
		t.Fatal("a writer was granted beside a reader")
	}
	if _, err := svc.ReleaseRW(ctx, "orders", tokenA, locks.ModeRead); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ReleaseRW(ctx, "orders", tokenA, locks.ModeRead); err != nil {
		t.Fatal(err)
	}
	w := mustAcquireRW(t, svc, "orders", locks.AcquireRequest{Token: tokenB, Mode: locks.ModeWrite})

	pool := locks.SemaphoreRequest{Permits: 3, Count: 2}
	s1, err := svc.AcquireSemaphore(ctx, "pool", pool)
	if err != nil {
		t.Fatal(err)
	}
	pool.Count = 1
	pool.TTL = 2 * time.Second
	s2, err := svc.AcquireSemaphore(ctx, "pool", pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AcquireSemaphore(ctx, "pool", pool); err == nil {
		t.Fatal("a fourth permit of three was granted")
	}
	if err := rdb.Publish(ctx, "end-of-test", "end").Err(); err != nil {
		t.Fatal(err)
	}

	prefix := locks.KeyPrefix(svc)
	rw, sem := locks.RWKeysOf(prefix, "orders").Channel, locks.SemaphoreKeysOf(prefix, "pool").Channel
	want := []string{
		rw + " acquired:" + fmt.Sprint(r.Fence) + ":5000",
		rw + " acquired:" + fmt.Sprint(r.Fence) + ":3000", // the re-entry, with its TTL
		rw + " drained", // the last reader: a wake-up for writers only
		rw + " acquired:" + fmt.Sprint(w.Fence) + ":30000",
		sem + " acquired:" + fmt.Sprint(s1.Fence) + ":30000:1",
		sem + " acquired:" + fmt.Sprint(s2.Fence) + ":2000:0",
	}
	var got []string
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a hang guard
		msg, err := sub.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		if msg.Channel == "end-of-test" {
			break
		}
		got = append(got, msg.Channel+" "+msg.Payload)
	}
	if !slices.Equal(got, want) {
		t.Errorf("messages =\n%q\nwant\n%q", got, want)
	}
}
