package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// newScriptService returns the services of a server on the Redis at url with
// the server's client settings (no resend of a failed command), its scripts
// riding go-redis's autopipeliner when pipelined, as cmd/server runs it by
// default.
func newScriptService(tb testing.TB, url string, pipelined bool, opTimeout time.Duration) *services {
	tb.Helper()
	env := []envOption{withRedis(url), withOpTimeout(opTimeout)} // on a cluster: a cluster client of its own, no resend
	if !onCluster() {
		opts, err := redis.ParseURL(url)
		if err != nil {
			tb.Fatal(err)
		}
		opts.MaxRetries = -1
		rdb := redis.NewClient(opts)
		tb.Cleanup(func() { _ = rdb.Close() })
		env[0] = withRedisClient(rdb, url)
	}
	if pipelined {
		env = append(env, withClient(pipelinedClient))
	}
	return newTestEnv(tb, env...).Svc
}

// Every concurrent caller gets its own reply: leases name the lock and token
// that caller asked for, through many shared pipelines.
func TestPipelinedRepliesReachTheirCallers(t *testing.T) {
	_, url := newRedis(t)
	svc := newScriptService(t, url, true, 2*time.Second)
	const workers, rounds = 64, 60
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				name := fmt.Sprintf("pipe-%d-%d", w, i)
				token := locks.NewToken()
				// A TTL unique to this call: the script echoes it, so a reply
				// delivered to the wrong caller would show.
				ttl := time.Duration(10_000+w*rounds+i) * time.Millisecond
				lease, err := svc.Acquire(t.Context(), name, locks.AcquireRequest{Token: token, TTL: ttl})
				if err != nil {
					errc <- fmt.Errorf("acquire %s: %w", name, err)
					return
				}
				if lease.Name != name || lease.Token != token || lease.TTL != ttl || lease.HoldCount != 1 || lease.Reentrant {
					errc <- fmt.Errorf("acquire %s got lease %+v", name, lease)
					return
				}
				st, err := svc.Inspect(t.Context(), name, token)
				if err != nil || !st.Held || !st.Owned || st.Fence != lease.Fence {
					errc <- fmt.Errorf("inspect %s = %+v, %v; want held and owned with fence %d", name, st, err, lease.Fence)
					return
				}
				rel, err := svc.Release(t.Context(), name, token)
				if err != nil || !rel.Released {
					errc <- fmt.Errorf("release %s = %+v, %v", name, rel, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// A Redis error reaches only the request it concerns: a lock whose key has
// the wrong type fails its own calls while the others in the same pipelines
// succeed.
func TestPipelinedErrorsStayWithTheirRequest(t *testing.T) {
	rdb, url := newRedis(t)
	svc := newScriptService(t, url, true, 2*time.Second)
	prefix := svc.Store.Config().KeyPrefix
	const n = 200
	for i := 0; i < n; i += 4 {
		// Every fourth lock key is a plain string: the acquire script hits WRONGTYPE.
		if err := rdb.Set(t.Context(), locks.KeysOf(prefix, fmt.Sprintf("mixed-%d", i)).Lock, "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	results := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i] = svc.Acquire(t.Context(), fmt.Sprintf("mixed-%d", i), locks.AcquireRequest{TTL: 5 * time.Second})
		}()
	}
	wg.Wait()
	for i, err := range results {
		broken := i%4 == 0
		switch {
		case broken && err == nil:
			t.Errorf("mixed-%d: acquire on a wrong-type key succeeded", i)
		case broken && errors.Is(err, store.ErrUnavailable):
			t.Errorf("mixed-%d: script error reported as unavailable: %v", i, err)
		case !broken && err != nil:
			t.Errorf("mixed-%d: %v (another request's error leaked here?)", i, err)
		}
	}
}

// While Redis does not answer, callers get ErrUnavailable at their own
// deadline or context.Canceled when they give up; once Redis answers again,
// later callers get their own replies, not the late ones of timed-out calls.
func TestPipelinedDeadlinesAndCancellation(t *testing.T) {
	_, url := startRedisContainer(t)
	svc := newScriptService(t, url, true, 150*time.Millisecond)
	admin := newClient(t, url)

	if _, err := svc.Acquire(t.Context(), "before-pause", locks.AcquireRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(t.Context(), "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	timeouts := make([]error, 20)
	for i := range timeouts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, timeouts[i] = svc.Acquire(t.Context(), fmt.Sprintf("paused-%d", i), locks.AcquireRequest{})
		}()
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancelled := make(chan error, 1)
	go func() {
		_, err := svc.Inspect(ctx, "paused-cancel", "")
		cancelled <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled caller got %v, want context.Canceled", err)
		}
	case <-time.After(time.Second): // a hang detector, far above the expected immediate return
		t.Error("cancelled caller still waiting while Redis is paused")
	}
	wg.Wait()
	for i, err := range timeouts {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("paused-%d: err = %v, want ErrUnavailable", i, err)
		}
	}
	// Once the pause ends, new calls get their own replies.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := svc.Inspect(t.Context(), "before-pause", "")
		if err == nil {
			if !st.Held || st.Name != "before-pause" {
				t.Errorf("inspect after pause = %+v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after the pause: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := range 50 {
		name := fmt.Sprintf("after-%d", i)
		ttl := time.Duration(2_000+i) * time.Millisecond // echoed by the script: a late reply of a paused call would carry 30s
		lease, err := svc.Acquire(t.Context(), name, locks.AcquireRequest{TTL: ttl})
		if err != nil || lease.Name != name || lease.TTL != ttl || lease.HoldCount != 1 {
			t.Errorf("acquire %s after the pause = %+v, %v", name, lease, err)
		}
	}
}
