package integration

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/client"
	"github.com/latchkey/latchkey/handlers"
	"github.com/redis/go-redis/v9"
)

// withWatchResync reads watched names again every d without a message: an
// hour in the tests whose events must come from the scripts' messages and
// the holders' expiry alone.
func withWatchResync(d time.Duration) envOption {
	return withServiceConfig(func(c *serviceConfig) { c.WatchResync = d })
}

// watchEvent is the next event of w that is not a comment; not within a
// minute fails.
func watchEvent(t *testing.T, w *holdStream) sseEvent {
	t.Helper()
	return w.next(t, time.Minute, false)
}

// wantWatchEvent is the next event of w, which must be name about fence
// (any fence when 0); it must carry an id.
func wantWatchEvent(t *testing.T, w *holdStream, name string, fence int64) sseEvent {
	t.Helper()
	ev := watchEvent(t, w)
	got, _ := ev.Data["fence"].(float64)
	if ev.Name != name || fence != 0 && int64(got) != fence {
		t.Fatalf("event %s (fence %d, data %v), want %s (fence %d)", ev.Name, int64(got), ev.Data, name, fence)
	}
	if ev.ID == "" {
		t.Errorf("%s event has no id", name)
	}
	return ev
}

// watchGoroutines counts the goroutines of watch hubs and watch handlers
// in this process.
func watchGoroutines(t *testing.T) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	return strings.Count(b.String(), "locks.(*watchHub).run") + strings.Count(b.String(), "handleWatch")
}

// TestWatchSeesEachChangeInOrder: a watcher of a lock sees its state, then
// acquired, released, acquired, force-released, acquired and expired, each
// with the lease's fence, the fences increasing.
func TestWatchSeesEachChangeInOrder(t *testing.T) {
	e := newTestEnv(t, withWatchResync(time.Hour))
	w := e.openWatch(t, "/v1/locks/watched/events", "LockState")
	if w.Status != http.StatusOK {
		t.Fatalf("watch: status %d body %s", w.Status, w.Body)
	}
	if ct := w.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q, want text/event-stream", ct)
	}
	if st := wantWatchEvent(t, w, "state", 0); st.Data["held"] != false || st.Data["name"] != "watched" {
		t.Fatalf("first state = %v, want the free lock watched", st.Data)
	}

	a := e.acquire(t, "watched", `{"ttl":"30s","owner":"worker-a"}`)
	if ev := wantWatchEvent(t, w, "acquired", a.Fence); ev.Data["owner"] != "worker-a" {
		t.Errorf("acquired data = %v, want worker-a's lease", ev.Data)
	}
	e.release(t, "watched", a.Token)
	wantWatchEvent(t, w, "released", a.Fence)

	b := e.acquire(t, "watched", `{"ttl":"30s"}`)
	wantWatchEvent(t, w, "acquired", b.Fence)
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/watched?force=true", "", "Authorization", "Bearer "+testAdminKey), http.StatusNoContent)
	wantWatchEvent(t, w, "force-released", b.Fence)

	c := e.acquire(t, "watched", `{"ttl":"300ms"}`)
	wantWatchEvent(t, w, "acquired", c.Fence)
	wantWatchEvent(t, w, "expired", c.Fence)
	if !(a.Fence < b.Fence && b.Fence < c.Fence) {
		t.Errorf("fences %d, %d, %d, want increasing", a.Fence, b.Fence, c.Fence)
	}
	for _, ev := range []string{"released", "expired"} {
		if n := metricValue(t, e, `latchkey_watch_events_total{event="`+ev+`",kind="lock"}`); n != 1 {
			t.Errorf("latchkey_watch_events_total of %s = %v, want 1", ev, n)
		}
	}
}

// TestWatchSemaphoreAndRWLock: the other primitives' streams start with
// their GET's state and report their leases with their permits or mode.
func TestWatchSemaphoreAndRWLock(t *testing.T) {
	e := newTestEnv(t, withWatchResync(time.Hour))
	sem := e.openWatch(t, "/v1/semaphores/pool/events", "SemaphoreState")
	wantWatchEvent(t, sem, "state", 0)
	r := e.do(t, "POST", "/v1/semaphores/pool", `{"permits":4,"count":3,"ttl":"30s"}`)
	wantStatus(t, r, http.StatusCreated)
	if ev := wantWatchEvent(t, sem, "acquired", r.Fence()); ev.Data["count"] != float64(3) {
		t.Errorf("acquired data = %v, want 3 permits", ev.Data)
	}
	wantStatus(t, e.do(t, "DELETE", "/v1/semaphores/pool", "", "Lock-Token", r.Token()), http.StatusOK)
	wantWatchEvent(t, sem, "released", r.Fence())

	rw := e.openWatch(t, "/v1/rwlocks/docs/events", "RWLockState")
	wantWatchEvent(t, rw, "state", 0)
	r = e.do(t, "POST", "/v1/rwlocks/docs", `{"mode":"write","ttl":"30s"}`)
	wantStatus(t, r, http.StatusCreated)
	if ev := wantWatchEvent(t, rw, "acquired", r.Fence()); ev.Data["mode"] != "write" {
		t.Errorf("acquired data = %v, want the write lease", ev.Data)
	}
}

// TestWatchersShareOneSubscriptionAndLeaveNothing: two watchers of a name
// on one instance cost one subscription of its channel; when both go away
// no subscription, no watch and no watch goroutine is left.
func TestWatchersShareOneSubscriptionAndLeaveNothing(t *testing.T) {
	e := newTestEnv(t)
	before := watchGoroutines(t)
	w1 := e.openWatch(t, "/v1/locks/shared/events", "LockState")
	w2 := e.openWatch(t, "/v1/locks/shared/events", "LockState")
	wantWatchEvent(t, w1, "state", 0)
	wantWatchEvent(t, w2, "state", 0)
	eventually(t, time.Minute, "the channel is subscribed", func() bool { return e.channelSubscribers(t, "shared") == 1 })
	if names, watches := e.Svc.Watches(); names != 1 || watches != 2 {
		t.Errorf("Watches() = %d names, %d watches; want 1 and 2", names, watches)
	}
	if got := e.channelSubscribers(t, "shared"); got != 1 {
		t.Errorf("subscribers of the channel = %d, want 1 for two watchers", got)
	}
	if n := metricValue(t, e, "latchkey_watch_streams"); n != 2 {
		t.Errorf("latchkey_watch_streams = %v, want 2", n)
	}
	w1.close()
	w2.close()
	eventually(t, time.Minute, "no watch is left", func() bool { n, w := e.Svc.Watches(); return n == 0 && w == 0 })
	eventually(t, time.Minute, "the channel is unsubscribed", func() bool { return e.channelSubscribers(t, "shared") == 0 })
	eventually(t, time.Minute, "no watch goroutine is left", func() bool { return watchGoroutines(t) <= before })
	if channels, listeners := e.Svc.Subscriptions(); channels != 0 || listeners != 0 {
		t.Errorf("Subscriptions() = %d channels, %d listeners; want none", channels, listeners)
	}
}

// TestWatchResumesFromLastEventID: a watcher reconnecting with the id of
// the last event it read gets no state again, only the next change; one
// with an older id gets the current state first.
func TestWatchResumesFromLastEventID(t *testing.T) {
	e := newTestEnv(t, withWatchResync(time.Hour))
	w := e.openWatch(t, "/v1/locks/resumed/events", "LockState")
	first := wantWatchEvent(t, w, "state", 0)
	l := e.acquire(t, "resumed", `{"ttl":"30s"}`)
	last := wantWatchEvent(t, w, "acquired", l.Fence)
	w.close()

	current := e.openWatch(t, "/v1/locks/resumed/events", "LockState", "Last-Event-ID", last.ID)
	stale := e.openWatch(t, "/v1/locks/resumed/events", "LockState", "Last-Event-ID", first.ID)
	if st := wantWatchEvent(t, stale, "state", l.Fence); st.ID != last.ID || st.Data["held"] != true {
		t.Errorf("state after a stale id = %v (id %s), want the held lock (id %s)", st.Data, st.ID, last.ID)
	}
	e.release(t, "resumed", l.Token)
	if ev := wantWatchEvent(t, current, "released", l.Fence); ev.ID == last.ID {
		t.Errorf("released event has the id of the state before it, %s", ev.ID)
	}
	wantWatchEvent(t, stale, "released", l.Fence)
}

// TestWatchHealsAKilledPubSubConnection: the shared pub/sub connection is
// killed (CLIENT KILL TYPE pubsub) while a watcher watches; with no periodic
// re-read to lean on, the watcher still reaches the final state after the
// next change.
func TestWatchHealsAKilledPubSubConnection(t *testing.T) {
	// CLIENT KILL would hit other tests' subscribers: a Redis, or a
	// cluster, of the test's own.
	var e *testEnv
	if onCluster() {
		e = newTestEnv(t, withCluster(ownCluster(t).URL), withWatchResync(time.Hour))
	} else {
		_, url := startRedisContainer(t)
		e = newTestEnv(t, withRedisClient(newClient(t, url), url), withWatchResync(time.Hour))
	}
	w := e.openWatch(t, "/v1/locks/healed/events", "LockState")
	wantWatchEvent(t, w, "state", 0)
	eventually(t, time.Minute, "the channel is subscribed", func() bool { return e.channelSubscribers(t, "healed") == 1 })
	var killed atomic.Int64
	err := forEachNode(t.Context(), e.RDB, func(ctx context.Context, c *redis.Client) error {
		n, err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
		killed.Add(n)
		return err
	})
	if err != nil || killed.Load() < 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want the subscriber's connection killed", killed.Load(), err)
	}
	eventually(t, time.Minute, "the channel is subscribed again", func() bool { return e.channelSubscribers(t, "healed") == 1 })
	l := e.acquire(t, "healed", `{"ttl":"30s"}`)
	e.release(t, "healed", l.Token)
	final := e.inspect(t, "healed")
	for {
		ev := watchEvent(t, w)
		fence, _ := ev.Data["fence"].(float64)
		held, _ := ev.Data["held"].(bool)
		if int64(fence) == final.Fence && (ev.Name == "released" || ev.Name == "state" && !held) {
			return // the final state: free, with the last fence
		}
	}
}

// TestWatchCapsRefuse: a client at its cap of streams is answered 429
// watch-streams-per-client, and an instance at its cap 503
// watch-streams-exhausted with Retry-After; refusals change nothing in
// Redis, and a refused client may watch once one of its streams closed.
func TestWatchCapsRefuse(t *testing.T) {
	e := newTestEnv(t, withTrustedProxies("127.0.0.1/32", "::1/128"), withRouterConfig(func(c *handlers.Config) {
		c.WatchMaxPerClient, c.WatchMaxStreams = 2, 3
	}))
	before := e.dumps(t)
	from := func(ip string) []string { return []string{"X-Forwarded-For", ip} }
	a1 := e.openWatch(t, "/v1/locks/capped/events", "LockState", from("192.0.2.1")...)
	e.openWatch(t, "/v1/locks/capped/events", "LockState", from("192.0.2.1")...)
	r := e.send(t.Context(), "GET", "/v1/locks/capped/events", "", from("192.0.2.1")...)
	wantProblem(t, r, http.StatusTooManyRequests, "watch-streams-per-client")
	e.openWatch(t, "/v1/locks/other/events", "LockState", from("192.0.2.2")...)
	r = e.send(t.Context(), "GET", "/v1/locks/capped/events", "", from("192.0.2.3")...)
	wantProblem(t, r, http.StatusServiceUnavailable, "watch-streams-exhausted")
	if retryAfter(t, r) < 1 {
		t.Errorf("Retry-After of watch-streams-exhausted missing")
	}
	if after := e.dumps(t); !maps.Equal(after, before) {
		t.Errorf("Redis after refusals = %v, want %v unchanged (a watch writes nothing)", after, before)
	}
	a1.close()
	// The server gives the stream back once it saw the client go.
	eventually(t, time.Minute, "a watch is served again once the client closed one", func() bool {
		return e.openWatch(t, "/v1/locks/capped/events", "LockState", from("192.0.2.1")...).Status == http.StatusOK
	})
}

// TestWatchRefusesABadName: a bad name, a Last-Event-ID too long or sent
// twice is a 400 naming the field, and watches nothing.
func TestWatchRefusesABadName(t *testing.T) {
	e := newTestEnv(t)
	wantProblem(t, e.do(t, "GET", "/v1/locks/%7D/events", ""), http.StatusBadRequest, "invalid-request")
	r := e.do(t, "GET", "/v1/semaphores/pool/events", "", "Last-Event-ID", strings.Repeat("x", 129))
	if p := wantProblem(t, r, http.StatusBadRequest, "invalid-request"); len(p.Errors) != 1 || p.Errors[0].Field != "Last-Event-ID" {
		t.Errorf("errors = %+v, want Last-Event-ID named", p.Errors)
	}
	r = e.do(t, "GET", "/v1/locks/pool/events", "", "Last-Event-ID", "1-0-a", "Last-Event-ID", "1-0-a")
	if p := wantProblem(t, r, http.StatusBadRequest, "invalid-request"); len(p.Errors) != 1 || p.Errors[0].Rule != "once" {
		t.Errorf("errors of two Last-Event-IDs = %+v, want Last-Event-ID once", p.Errors)
	}
	if names, _ := e.Svc.Watches(); names != 0 {
		t.Errorf("names watched = %d, want 0", names)
	}
}

// TestWatchSeesAKeepaliveLeaseLost: a keep-alive lease whose holder stops
// its heartbeats is lost, and the watcher is told why, with its fence.
func TestWatchSeesAKeepaliveLeaseLost(t *testing.T) {
	e := newTestEnv(t, withRenewer(instancePoll), withWatchResync(time.Hour))
	w := e.openWatch(t, "/v1/locks/ka-watched/events", "LockState")
	wantWatchEvent(t, w, "state", 0)
	r := e.do(t, "POST", "/v1/locks/ka-watched", `{"ttl":"1s","keepalive":true,"heartbeat":"500ms"}`)
	wantStatus(t, r, http.StatusCreated)
	wantWatchEvent(t, w, "acquired", r.Fence())
	if ev := wantWatchEvent(t, w, "lost", r.Fence()); ev.Data["reason"] != "heartbeat_missed" {
		t.Errorf("lost data = %v, want reason heartbeat_missed", ev.Data)
	}
}

// TestWatchSeesItsTenantsNamesOnly: tenant a's watcher of "orders" sees
// a's lease of it, never b's lease of b's "orders".
func TestWatchSeesItsTenantsNamesOnly(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile(""))), withWatchResync(time.Hour))
	a, b := bearer(secretA), bearer(secretB)
	w := e.openWatch(t, "/v1/locks/orders/events", "LockState", a...)
	if w.Status != http.StatusOK {
		t.Fatalf("a's watch: status %d body %s", w.Status, w.Body)
	}
	wantWatchEvent(t, w, "state", 0)
	lb := e.acquire(t, "orders", `{"ttl":"1m"}`, b...)
	la := e.acquire(t, "orders", `{"ttl":"1m"}`, a...)
	if ev := wantWatchEvent(t, w, "acquired", la.Fence); int64(ev.Data["fence"].(float64)) == lb.Fence {
		t.Errorf("a's watcher saw b's lease %d", lb.Fence)
	}
	e.release(t, "orders", lb.Token, b...)
	e.release(t, "orders", la.Token, a...)
	wantWatchEvent(t, w, "released", la.Fence)
}

// TestClientWatchFollowsALock: the Go client's Watch gets the lock's
// state, then its acquisition and release with the lease's fence.
func TestClientWatchFollowsALock(t *testing.T) {
	e := newClientEnv(t, withWatchResync(time.Hour))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events := e.c.Watch(ctx, client.KindLock, "client-watched")
	next := func() client.Event {
		t.Helper()
		select {
		case ev := <-events:
			if ev.Err != nil {
				t.Fatalf("watch: %v", ev.Err)
			}
			return ev
		case <-time.After(time.Minute):
			t.Fatal("no watch event within a minute")
		}
		return client.Event{}
	}
	if ev := next(); ev.Type != client.EventState {
		t.Fatalf("first event %+v, want the state", ev)
	}
	l, err := e.c.Lock(t.Context(), "client-watched", client.LockOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != client.EventAcquired || ev.Fence != l.Fence {
		t.Fatalf("event %+v, want acquired with fence %d", ev, l.Fence)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != client.EventReleased || ev.Fence != l.Fence {
		t.Fatalf("event %+v, want released with fence %d", ev, l.Fence)
	}
}

// TestWatchersOfANameCostOneReadPerChange: 50 watchers of one name on one
// instance each get a change, and the instance read the name's state once
// or twice for it (its subscription's confirmation may come with the
// change), never once per watcher; they send heartbeat comments between
// events.
func TestWatchersOfANameCostOneReadPerChange(t *testing.T) {
	const watchers = 50
	e := newTestEnv(t, withWatchResync(time.Hour), withRouterConfig(func(c *handlers.Config) {
		c.WatchMaxPerClient, c.WatchPing = watchers, 20*time.Millisecond
	}))
	var ws []*holdStream
	for range watchers {
		w := e.openWatch(t, "/v1/locks/crowded/events", "LockState")
		wantWatchEvent(t, w, "state", 0)
		ws = append(ws, w)
	}
	eventually(t, time.Minute, "the channel is subscribed", func() bool { return e.channelSubscribers(t, "crowded") == 1 })
	if n := ws[0].next(t, time.Minute, true); n.Comment != "ping" {
		t.Errorf("between events: %+v, want a ping comment", n)
	}
	before := metricValue(t, e, "latchkey_watch_reads_total")
	l := e.acquire(t, "crowded", `{"ttl":"30s"}`)
	for _, w := range ws {
		wantWatchEvent(t, w, "acquired", l.Fence)
	}
	if reads := metricValue(t, e, "latchkey_watch_reads_total") - before; reads < 1 || reads > 2 {
		t.Errorf("state reads for one change seen by %d watchers = %v, want 1 (2 with a late confirmation)", watchers, reads)
	}
	if got := e.channelSubscribers(t, "crowded"); got != 1 {
		t.Errorf("subscribers of the channel = %d, want 1 for %d watchers", got, watchers)
	}
}

// TestWatchNeedsTheLocksReadScope: a key without locks:read is refused a
// watch (403 forbidden naming the scope), and one that may use only some
// names is refused the others; no watch is opened.
func TestWatchNeedsTheLocksReadScope(t *testing.T) {
	const gateOnly, ordersOnly = "watch-gate-only-secret-0123456789", "watch-orders-only-secret-012345678"
	keys := fmt.Sprintf(`tenants:
  a:
    keys:
      - {id: a-gate, sha256: %s, scopes: [ratelimit:gate]}
      - {id: a-orders, sha256: %s, scopes: [locks:read], names: ["orders-*"]}
`, hashHex(gateOnly), hashHex(ordersOnly))
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, keys)))
	r := e.do(t, "GET", "/v1/locks/orders-1/events", "", bearer(gateOnly)...)
	wantProblem(t, r, http.StatusForbidden, "forbidden")
	if h := r.Header.Get("WWW-Authenticate"); !strings.Contains(h, `scope="locks:read"`) {
		t.Errorf("WWW-Authenticate = %q, want the locks:read scope named", h)
	}
	wantProblem(t, e.do(t, "GET", "/v1/semaphores/billing/events", "", bearer(ordersOnly)...), http.StatusForbidden, "forbidden")
	if names, _ := e.Svc.Watches(); names != 0 {
		t.Errorf("names watched after the refusals = %d, want 0", names)
	}
	if w := e.openWatch(t, "/v1/semaphores/orders-1/events", "SemaphoreState", bearer(ordersOnly)...); w.Status != http.StatusOK {
		t.Errorf("a watch of a name the key may use: status %d body %s", w.Status, w.Body)
	}
}
