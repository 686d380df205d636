package integration

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// TestWaitStorm: 200 concurrent waiters on one lock, each holding it
// briefly. Every one acquires exactly once within its wait, fences strictly
// increase, no two hold at once, and afterwards no subscription and no
// waiter is left behind.
func TestWaitStorm(t *testing.T) {
	e := newTestEnv(t)
	const n = 200
	var (
		holding atomic.Int32
		overlap atomic.Int32
		mu      sync.Mutex
		fences  []int64
		wg      sync.WaitGroup
		results = make([]response, n)
	)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := e.send(t.Context(), "POST", "/v1/locks/storm", `{"ttl":"10s","wait":"60s"}`)
			results[i] = r
			if r.Status != http.StatusCreated {
				return
			}
			if holding.Add(1) != 1 {
				overlap.Add(1)
			}
			mu.Lock()
			fences = append(fences, r.Fence())
			mu.Unlock()
			time.Sleep(time.Millisecond)
			holding.Add(-1)
			results[i] = e.send(t.Context(), "DELETE", "/v1/locks/storm", "", "Lock-Token", r.Token())
		}()
	}
	close(start)
	wg.Wait()

	for i, r := range results {
		if r.Err != nil || r.Status != http.StatusOK {
			t.Errorf("waiter %d: status %d err %v body %s (want acquired, then released with 200)", i, r.Status, r.Err, r.Body)
		}
	}
	if got := overlap.Load(); got != 0 {
		t.Errorf("%d grants overlapped another holder, want 0", got)
	}
	if len(fences) != n {
		t.Fatalf("%d grants, want %d", len(fences), n)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence %d = %d after %d: fences must strictly increase in grant order", i, fences[i], fences[i-1])
		}
	}
	eventually(t, 10*time.Second, "the storm's channel is unsubscribed", func() bool {
		return e.channelSubscribers(t, "storm") == 0
	})
	if ch, l := e.Svc.Subscriptions(); ch != 0 || l != 0 {
		t.Errorf("subscriptions after the storm = %d channels, %d listeners; want 0, 0", ch, l)
	}
	m := metrics(t, e)
	for series, want := range map[string]float64{
		"latchkey_pubsub_channels": 0, "latchkey_lock_listeners": 0,
		`latchkey_lock_waits_total{outcome="acquired"}`: n, // every request asked to wait
	} {
		if got := m[series]; got != want {
			t.Errorf("%s = %v after the storm, want %v", series, got, want)
		}
	}
	if st := e.inspect(t, "storm"); st.Waiters != 0 || st.Held {
		t.Errorf("state after the storm = %+v, want free with 0 waiters", st)
	}
}

// TestWaitEndsWithLockHeld: a wait that ends without the lock is a 409
// lock-held with Retry-After, after the wait and not before, and leaves no
// waiter registered.
func TestWaitEndsWithLockHeld(t *testing.T) {
	e := newTestEnv(t)
	e.acquire(t, "busy", `{"ttl":"10s"}`)
	start := time.Now()
	r := e.send(t.Context(), "POST", "/v1/locks/busy", `{"wait":"300ms"}`)
	elapsed := time.Since(start)
	if r.Status != http.StatusConflict || !strings.Contains(string(r.Body), `"lock-held"`) {
		t.Fatalf("status = %d body %s, want 409 lock-held", r.Status, r.Body)
	}
	if elapsed < 300*time.Millisecond {
		t.Errorf("answered after %s, want at least the 300ms wait", elapsed)
	}
	if ra, _ := strconv.Atoi(r.Header.Get("Retry-After")); ra < 9 || ra > 10 {
		t.Errorf("Retry-After = %q, want the holder's remaining TTL (9-10s)", r.Header.Get("Retry-After"))
	}
	if st := e.inspect(t, "busy"); st.Waiters != 0 {
		t.Errorf("waiters = %d after the wait ended, want 0", st.Waiters)
	}
}

// TestWaitValidation: a wait beyond the server's bound or of the wrong form
// is a 400 naming the field and rule, and registers nothing.
func TestWaitValidation(t *testing.T) {
	e := newTestEnv(t, withServiceConfig(func(c *serviceConfig) { c.MaxWait = 5 * time.Second }))
	tests := []struct {
		body, rule string
	}{
		{`{"wait":"6s"}`, `"rule":"max"`},
		{`{"wait":"-1s"}`, `"rule":"duration"`},
		{`{"wait":"soon"}`, `"rule":"duration"`},
	}
	for _, tt := range tests {
		r := e.send(t.Context(), "POST", "/v1/locks/v", tt.body)
		if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), `"field":"wait"`) || !strings.Contains(string(r.Body), tt.rule) {
			t.Errorf("%s: status %d body %s, want 400 naming wait and %s", tt.body, r.Status, r.Body, tt.rule)
		}
	}
	if ks := e.keys(t); len(ks) != 0 {
		t.Errorf("keys after bad requests = %v, want none", ks)
	}
}

// TestWaiterTakesExpiredLease: the holder never releases; the waiter gets
// the lock when the holder's TTL runs out, without any message, not at the
// end of its own wait.
func TestWaiterTakesExpiredLease(t *testing.T) {
	e := newTestEnv(t)
	f1 := e.acquire(t, "exp", `{"ttl":"700ms"}`).Fence
	start := time.Now()
	r := e.send(t.Context(), "POST", "/v1/locks/exp", `{"wait":"60s"}`)
	elapsed := time.Since(start)
	if r.Status != http.StatusCreated || r.Fence() <= f1 {
		t.Fatalf("status %d fence %d body %s, want 201 with a fence above %d", r.Status, r.Fence(), r.Body, f1)
	}
	if elapsed > 20*time.Second {
		t.Errorf("acquired after %s, want soon after the holder's 700ms TTL, long before the 60s wait ends", elapsed)
	}
}

// deafSubscriber is a RedisClient whose pub/sub connection goes to another
// Redis, where no release is ever published: every wake-up is missed.
type deafSubscriber struct {
	store.Client
	deaf *redis.Client
}

func (d deafSubscriber) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return d.deaf.Subscribe(ctx, channels...)
}

// TestMissedMessageStillAcquires: with every wake-up lost, a waiter still
// gets the lock after the holder's TTL, by its timed re-check, not at the
// end of its own wait.
func TestMissedMessageStillAcquires(t *testing.T) {
	rdb, url := newRedis(t)
	deaf := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = deaf.Close() })
	e := newTestEnv(t, withRedisClient(rdb, url),
		withClientOf(func(c redis.UniversalClient) store.Client { return deafSubscriber{Client: c, deaf: deaf} }))
	token := e.acquire(t, "deaf", `{"ttl":"1s"}`).Token
	got := make(chan response, 1)
	start := time.Now()
	go func() { got <- e.send(t.Context(), "POST", "/v1/locks/deaf", `{"wait":"60s"}`) }()
	e.waitForWaiters(t, "deaf", 1)
	e.release(t, "deaf", token) // publishes a wake-up the waiter never hears
	r := <-got
	elapsed := time.Since(start)
	if r.Status != http.StatusCreated {
		t.Fatalf("status %d body %s, want 201", r.Status, r.Body)
	}
	if elapsed > 20*time.Second {
		t.Errorf("acquired after %s, want soon after the holder's 1s TTL, long before the 60s wait ends", elapsed)
	}
}

// TestSubscriberConnectionKilled: the shared pub/sub connection is killed
// (CLIENT KILL TYPE pubsub) while a waiter waits and the holder releases at
// once: the waiter still acquires well before the holder's 60s TTL, and the
// subscription is restored, so later releases are heard again.
func TestSubscriberConnectionKilled(t *testing.T) {
	_, url := startRedisContainer(t) // CLIENT KILL would hit other tests' subscribers
	rdb := newClient(t, url)
	e := newTestEnv(t, withRedisClient(rdb, url))

	waitOnce := func(step string, kill bool) {
		token := e.acquire(t, "killed", `{"ttl":"60s"}`).Token
		got := make(chan response, 1)
		go func() { got <- e.send(t.Context(), "POST", "/v1/locks/killed", `{"wait":"60s"}`) }()
		e.waitForWaiters(t, "killed", 1)
		if kill {
			// The waiter is queued before its subscription is confirmed:
			// kill the connection only once it carries the channel.
			eventually(t, 10*time.Second, "the waiter's channel is subscribed", func() bool { return e.channelSubscribers(t, "killed") == 1 })
			n, err := rdb.ClientKillByFilter(t.Context(), "TYPE", "pubsub").Result()
			if err != nil || n != 1 {
				t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want 1 connection killed", n, err)
			}
		}
		start := time.Now()
		e.release(t, "killed", token)
		r := <-got
		if r.Status != http.StatusCreated {
			t.Fatalf("%s: status %d body %s, want 201", step, r.Status, r.Body)
		}
		if elapsed := time.Since(start); elapsed > 20*time.Second {
			t.Errorf("%s: acquired %s after the release, want well before the holder's 60s TTL", step, elapsed)
		}
		e.release(t, "killed", r.Token())
	}
	waitOnce("release right after CLIENT KILL", true)
	eventually(t, 10*time.Second, "subscriptions are dropped", func() bool { return e.channelSubscribers(t, "killed") == 0 })
	waitOnce("release after reconnecting", false)
}

// TestWaiterDisconnectTakesNothing: a waiting client that goes away stops
// waiting at once, leaves no waiter behind, and never takes the lock.
func TestWaiterDisconnectTakesNothing(t *testing.T) {
	e := newTestEnv(t)
	l := e.acquire(t, "gone", `{"ttl":"10s"}`)
	token, fence := l.Token, l.Fence
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan response, 1)
	go func() { got <- e.send(ctx, "POST", "/v1/locks/gone", `{"wait":"20s"}`) }()
	e.waitForWaiters(t, "gone", 1)
	cancel()
	if r := <-got; r.Err == nil {
		t.Fatalf("cancelled request answered %d, want a client error", r.Status)
	}
	e.waitForWaiters(t, "gone", 0)
	eventually(t, 10*time.Second, "no listener is left", func() bool { _, l := e.Svc.Subscriptions(); return l == 0 })
	e.release(t, "gone", token)
	if st := e.inspect(t, "gone"); st.Held || st.Fence != fence {
		t.Errorf("state after release = %+v, want free with the last fence %d (nobody else took it)", st, fence)
	}
}

// commandCounts reads INFO commandstats: calls per command since the last
// CONFIG RESETSTAT.
func commandCounts(t testing.TB, rdb redis.UniversalClient) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// serverRequests sums the commands clients sent (script calls, pub/sub
// commands, pings), leaving out the test's own INFO and CONFIG and the
// commands scripts ran inside Redis (commandstats counts those too).
func serverRequests(m map[string]int64) int64 {
	var n int64
	for _, name := range []string{"evalsha", "evalsha_ro", "eval", "subscribe", "unsubscribe", "ping", "publish"} {
		n += m[name]
	}
	return n
}

// TestWaitingCostsNothing: waiters cost Redis nothing while nothing
// changes, except their timed re-checks. 20 waiters wait 12s for a lock held
// for a minute: once they are all registered and have tried again on the
// subscription's confirmation, Redis sees no command at all for 1.5s
// (beyond the subscriber's health-check PING), and over the whole wait the
// commands per waiter-second stay bounded.
func TestWaitingCostsNothing(t *testing.T) {
	_, url := startRedisContainer(t) // a private Redis: its command counts are ours alone
	rdb := newClient(t, url)
	e := newTestEnv(t, withRedisClient(rdb, url))
	e.acquire(t, "cost", `{"ttl":"1m"}`)

	const n, wait, window = 20, 12 * time.Second, 1500 * time.Millisecond
	if err := rdb.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]response, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.send(t.Context(), "POST", "/v1/locks/cost", `{"wait":"`+wait.String()+`"}`)
		}()
	}
	start := time.Now()
	e.waitForWaiters(t, "cost", n)
	// A waiter that tried before the shared subscription was confirmed
	// tries once more when it is: the steady state begins when the count
	// of commands stops moving (on a loaded machine the confirmation may
	// come late).
	eventually(t, wait/2, "Redis has the shared subscription", func() bool { return e.channelSubscribers(t, "cost") == 1 })
	before := serverRequests(commandCounts(t, rdb))
	for still, settle := 0, time.Now().Add(wait/2); still < 5 && time.Now().Before(settle); {
		time.Sleep(100 * time.Millisecond)
		now := serverRequests(commandCounts(t, rdb))
		if now != before {
			still = -1
		}
		still, before = still+1, now
	}
	time.Sleep(window)
	steady := serverRequests(commandCounts(t, rdb)) - before
	if time.Since(start) >= wait {
		t.Fatalf("the machine is too slow for this test: the waits ended before the steady window did")
	}
	wg.Wait()
	total := commandCounts(t, rdb)

	for i, r := range results {
		if r.Status != http.StatusConflict {
			t.Errorf("waiter %d: status %d, want 409 after its wait", i, r.Status)
		}
	}
	// The GETs of waitForWaiters ran scripts too; they are before "before".
	if steady > 1 {
		t.Errorf("%d Redis commands while %d waiters waited %s and nothing changed, want at most 1 (a health-check PING)", steady, n, window)
	}
	perWaiterSecond := float64(serverRequests(total)) / (n * wait.Seconds())
	t.Logf("commands over the whole wait (scripts' inner commands included): %v; %.2f requests per waiter-second",
		total, perWaiterSecond)
	// Each waiter: first attempt, last attempt, leave; one SUBSCRIBE for all.
	if perWaiterSecond > 1.5 {
		t.Errorf("%.2f Redis requests per waiter-second, want at most 1.5", perWaiterSecond)
	}
}

// TestWaitForKeepaliveLease: a lease the service keeps alive never expires
// under a waiter, however short its TTL: the waiter's timed re-checks find
// it renewed and its wait ends with 409. Once released, a waiter asking for
// a kept-alive lease itself gets one.
func TestWaitForKeepaliveLease(t *testing.T) {
	e := newTestEnv(t)
	startRenewer(t, e.Svc)
	// A 2s TTL is renewed every 667ms: a renewal can be late by 1.3s on a
	// busy machine before the lease runs out.
	holder := e.acquire(t, "kept", `{"ttl":"2s","keepalive":true,"max_hold":"1m"}`).Token
	r := e.send(t.Context(), "POST", "/v1/locks/kept", `{"wait":"5s"}`)
	if r.Status != http.StatusConflict || !strings.Contains(string(r.Body), `"lock-held"`) {
		t.Fatalf("waiting for a kept-alive lease: %d %s, want 409 lock-held after the wait", r.Status, r.Body)
	}
	got := make(chan response, 1)
	go func() {
		// 3s, renewed every second: on a busy machine a 1s TTL, renewed
		// every 333ms, can run out between two late renewals.
		got <- e.send(t.Context(), "POST", "/v1/locks/kept", `{"ttl":"3s","wait":"30s","keepalive":true,"max_hold":"1m"}`)
	}()
	e.waitForWaiters(t, "kept", 1)
	e.release(t, "kept", holder)
	r = <-got
	if r.Status != http.StatusCreated || !strings.Contains(string(r.Body), `"keepalive"`) {
		t.Fatalf("waiter: %d %s, want 201 with a kept-alive lease", r.Status, r.Body)
	}
	// One renewal every ttl/3: four are more than a TTL, only renewals keep it.
	before := metricValue(t, e, "latchkey_keepalive_renewals_total")
	eventually(t, 30*time.Second, "the waiter's lease is renewed four times", func() bool {
		return metricValue(t, e, "latchkey_keepalive_renewals_total")-before >= 4
	})
	if st := e.inspectAs(t, "kept", r.Token()); !st.Held || !st.ownedIs(true) {
		t.Errorf("the waiter's kept-alive lease expired: %+v", st)
	}
}
