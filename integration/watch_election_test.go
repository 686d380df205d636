package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// openElectionWatch opens the watch stream of the election name, each
// event's data checked against the spec.
func (e *testEnv) openElectionWatch(t *testing.T, name string) *holdStream {
	t.Helper()
	schemas := map[string]string{"state": "ElectionState"}
	for _, ev := range []string{"elected", "proclaimed", "vacant"} {
		schemas[ev] = "WatchElectionEvent"
	}
	w := e.openStream(t, "GET", "/v1/elections/"+name+"/events", "", schemas)
	if w.Status != http.StatusOK {
		t.Fatalf("watch %s: status %d body %s", name, w.Status, w.Body)
	}
	return w
}

// TestWatchElectionSeesEachLeader: a watcher of an election over HTTP sees
// its state, then each leader elected with its term, value and when the
// term began, a value proclaimed in the same term, and vacant on resignation (no reason), on
// removal (force_released) and on expiry (expired); the terms increase.
func TestWatchElectionSeesEachLeader(t *testing.T) {
	e := newTestEnv(t, withWatchResync(time.Hour))
	w := e.openElectionWatch(t, "watched")
	if st := wantWatchEvent(t, w, "state", 0); st.Data["leader"] != nil || st.Data["name"] != "watched" {
		t.Fatalf("first state = %v, want the vacant election watched", st.Data)
	}
	campaign := func(body string) response {
		t.Helper()
		r := e.do(t, "POST", "/v1/elections/watched", body)
		wantStatus(t, r, http.StatusCreated)
		return r
	}

	a := campaign(`{"value":"10.0.0.7:5432","owner":"db-1","ttl":"30s"}`)
	since := e.election(t, "watched").Leader.Since.Format(time.RFC3339Nano)
	if ev := wantWatchEvent(t, w, "elected", a.Fence()); ev.Data["value"] != "10.0.0.7:5432" || ev.Data["owner"] != "db-1" ||
		ev.Data["term"] != float64(a.Fence()) || ev.Data["since"] != since {
		t.Errorf("elected data = %v, want db-1's leadership with its term, value and since %s", ev.Data, since)
	}
	wantStatus(t, e.do(t, "PUT", "/v1/elections/watched/value", `{"value":"10.0.0.9:5432"}`, "Lock-Token", a.Token()), http.StatusOK)
	if ev := wantWatchEvent(t, w, "proclaimed", a.Fence()); ev.Data["value"] != "10.0.0.9:5432" || ev.Data["since"] != since {
		t.Errorf("proclaimed data = %v, want the new value, since %s", ev.Data, since)
	}
	wantStatus(t, e.do(t, "DELETE", "/v1/elections/watched", "", "Lock-Token", a.Token()), http.StatusOK)
	if ev := wantWatchEvent(t, w, "vacant", a.Fence()); ev.Data["reason"] != nil {
		t.Errorf("vacant on resignation: %v, want no reason", ev.Data)
	}

	b := campaign(`{"value":"b","ttl":"30s"}`)
	wantWatchEvent(t, w, "elected", b.Fence())
	wantStatus(t, e.do(t, "DELETE", "/v1/elections/watched?force=true", "", "Authorization", "Bearer "+testAdminKey), http.StatusNoContent)
	if ev := wantWatchEvent(t, w, "vacant", b.Fence()); ev.Data["reason"] != "force_released" {
		t.Errorf("vacant on removal: %v, want reason force_released", ev.Data)
	}

	c := campaign(`{"value":"c","ttl":"300ms"}`)
	wantWatchEvent(t, w, "elected", c.Fence())
	if ev := wantWatchEvent(t, w, "vacant", c.Fence()); ev.Data["reason"] != "expired" {
		t.Errorf("vacant on expiry: %v, want reason expired", ev.Data)
	}
	if !(a.Fence() < b.Fence() && b.Fence() < c.Fence()) {
		t.Errorf("terms %d, %d, %d, want increasing", a.Fence(), b.Fence(), c.Fence())
	}
	if n := metricValue(t, e, `latchkey_watch_events_total{event="vacant",kind="election"}`); n != 3 {
		t.Errorf("latchkey_watch_events_total of vacant = %v, want 3", n)
	}
}

// electionWatcher follows one election's watch stream in the background,
// across reconnects, and keeps every event it read.
type electionWatcher struct {
	t      *testing.T
	e      *testEnv
	name   string
	mu     sync.Mutex
	w      *holdStream
	events []sseEvent
	done   chan struct{}
}

// watchElection opens a watch of the election name on e and reads it in
// the background.
func watchElection(t *testing.T, e *testEnv, name string) *electionWatcher {
	ew := &electionWatcher{t: t, e: e, name: name}
	ew.open()
	return ew
}

// open opens the stream, with Last-Event-ID when headerPairs name it, and
// starts reading it.
func (ew *electionWatcher) open(headerPairs ...string) {
	ew.t.Helper()
	schemas := map[string]string{"state": "ElectionState"}
	for _, ev := range []string{"elected", "proclaimed", "vacant"} {
		schemas[ev] = "WatchElectionEvent"
	}
	w := ew.e.openStream(ew.t, "GET", "/v1/elections/"+ew.name+"/events", "", schemas, headerPairs...)
	if w.Status != http.StatusOK {
		ew.t.Errorf("watch %s: status %d body %s", ew.name, w.Status, w.Body)
		return
	}
	done := make(chan struct{})
	ew.mu.Lock()
	ew.w, ew.done = w, done
	ew.mu.Unlock()
	go func() {
		defer close(done)
		for ev := range w.Events {
			if ev.Comment != "" {
				continue
			}
			wantEventSchema(ew.t, w.schemas, ev)
			ew.mu.Lock()
			ew.events = append(ew.events, ev)
			ew.mu.Unlock()
		}
	}()
}

// reconnect closes the stream and opens it again with the id of the last
// event read as Last-Event-ID.
func (ew *electionWatcher) reconnect() { ew.reopen(ew.e, true) }

// moveTo waits for the stream to end (its instance died) and opens it on e,
// with the id of the last event read as Last-Event-ID.
func (ew *electionWatcher) moveTo(e *testEnv) { ew.reopen(e, false) }

// switchTo closes the stream and opens it on e, with the id of the last
// event read as Last-Event-ID.
func (ew *electionWatcher) switchTo(e *testEnv) { ew.reopen(e, true) }

// reopen opens the stream on e with the id of the last event read as
// Last-Event-ID once the current one has ended: closed first when close
// is set, else ended by its server.
func (ew *electionWatcher) reopen(e *testEnv, close bool) {
	ew.t.Helper()
	ew.mu.Lock()
	w, done := ew.w, ew.done
	ew.mu.Unlock()
	if close {
		w.close()
	}
	select {
	case <-done:
	case <-time.After(time.Minute): // a hang guard
		ew.t.Fatalf("the watch of %s did not end within a minute", ew.name)
	}
	ew.mu.Lock()
	ew.e = e
	last := ew.events[len(ew.events)-1].ID
	ew.mu.Unlock()
	ew.open("Last-Event-ID", last)
}

// seen returns the events read so far.
func (ew *electionWatcher) seen() []sseEvent {
	ew.mu.Lock()
	defer ew.mu.Unlock()
	return slices.Clone(ew.events)
}

// elected counts the elected events read so far.
func (ew *electionWatcher) elected() int {
	n := 0
	for _, ev := range ew.seen() {
		if ev.Name == "elected" {
			n++
		}
	}
	return n
}

// eventTerm is the term an election's event is about: the leader's, or
// the last one issued when a state is vacant.
func eventTerm(ev sseEvent) int64 {
	if l, ok := ev.Data["leader"].(map[string]any); ok {
		term, _ := l["term"].(float64)
		return int64(term)
	}
	term, _ := ev.Data["term"].(float64)
	return int64(term)
}

// atVacancy reports whether ev says the election is vacant after term.
func atVacancy(ev sseEvent, term int64) bool {
	switch ev.Name {
	case "vacant":
		return eventTerm(ev) == term
	case "state":
		return ev.Data["leader"] == nil && eventTerm(ev) == term
	}
	return false
}

// wantTermsIncreasing checks that the watcher's terms never go back and
// that each elected event's term is greater than every one before it.
func (ew *electionWatcher) wantTermsIncreasing(t *testing.T, who string) {
	t.Helper()
	var last int64
	for i, ev := range ew.seen() {
		term := eventTerm(ev)
		if ev.Name == "elected" && term <= last || term < last {
			t.Errorf("%s: event %d %s of term %d after term %d, want terms increasing", who, i, ev.Name, term, last)
		}
		last = max(last, term)
	}
}

// TestElectionWatchersUnderConcurrency: four watchers of an election, two
// on each of its instances, follow TestElectionInvariantUnderConcurrency's
// candidates. Mid-run Redis's pub/sub connections are killed (CLIENT KILL
// TYPE pubsub, on every node) and one watcher reconnects with the id of
// the last event it read; after the run Redis is paused (every primary on
// a cluster) and one more leader is elected and resigns. Periodic re-reads
// are off: what heals a watcher is the re-read its hub makes on
// resubscribing. Opening the watchers adds no key to Redis. Every watcher's terms increase, each elected term above
// every earlier one, and every watcher reaches the final state, vacant
// after the last term: no final event lost.
func TestElectionWatchersUnderConcurrency(t *testing.T) {
	pr := newPausableRedis(t)
	opts := []envOption{withRedisClient(pr.RDB, pr.URL)}
	if onCluster() {
		opts = []envOption{withCluster(pr.URL)}
	}
	e1 := newTestEnv(t, append(opts, withRenewer(0), withWatchResync(time.Hour))...)
	envs := []*testEnv{e1, newTestEnv(t, beside(e1), withRenewer(0), withWatchResync(time.Hour))}
	const name = "watched-inv"

	keys := func() int64 {
		var n atomic.Int64
		err := forEachPrimary(t.Context(), e1.RDB, func(ctx context.Context, c *redis.Client) error {
			size, err := c.DBSize(ctx).Result()
			n.Add(size)
			return err
		})
		if err != nil {
			t.Fatalf("DBSIZE: %v", err)
		}
		return n.Load()
	}
	before := keys()
	watchers := watchEachInstance(t, envs, name)
	// A watcher costs no Redis key: its subscription is a channel's.
	if after := keys(); after != before {
		t.Errorf("Redis holds %d keys with four watchers open, %d before: want a watcher to cost no key", after, before)
	}

	mid := func() {
		watchers[0].awaitElected(4)
		pr.killSubscribers()
		watchers[0].awaitElected(8)
		watchers[1].reconnect()
	}
	records, abandoned := runElection(t, envs, name, electionRun{mid: mid})
	if t.Failed() {
		return
	}
	wantPermitsNeverExceeded(t, records, 1)
	wantFencesInGrantOrder(t, records)
	eventually(t, time.Minute, "the election vacant, nobody waiting", func() bool {
		st := e1.election(t, name)
		return st.Leader == nil && st.Candidates == 0
	})

	pr.pauseFor(500 * time.Millisecond)
	var last electionLeaseJSON
	eventually(t, time.Minute, "a leader elected after the pause", func() bool {
		r := e1.send(t.Context(), http.MethodPost, electionPath(name), `{"value": "last", "ttl": "30s"}`)
		if r.Status != http.StatusCreated {
			return false // Redis's clients may still be reconnecting
		}
		last = electionLeaseJSON{Term: r.Fence(), Token: r.Token()}
		return true
	})
	wantStatus(t, e1.do(t, http.MethodDelete, electionPath(name), "", "Lock-Token", last.Token), http.StatusOK)
	if st := e1.election(t, name); st.Leader != nil || st.Term != last.Term {
		t.Fatalf("final state %+v, want vacant after term %d", st, last.Term)
	}
	t.Logf("%d leaderships, %d campaigns abandoned, final term %d", len(records), abandoned, last.Term)

	wantWatchersAtVacancy(t, watchers, last.Term)
}

// pausableRedis is a Redis of the test's own (in the cluster pass a cluster
// of its own), so that pausing it or killing its connections hits no other
// test.
type pausableRedis struct {
	t   *testing.T
	URL string                // the seed URL in the cluster pass
	RDB redis.UniversalClient // reads and kills on it; a cluster client in the cluster pass

	pause func() (resume func())
}

// newPausableRedis starts a Redis container (a cluster of redis-server
// processes in the cluster pass) for t.
func newPausableRedis(t *testing.T) *pausableRedis {
	t.Helper()
	if onCluster() {
		cl := ownCluster(t)
		pr := &pausableRedis{t: t, URL: cl.URL, RDB: cl.Client(t)}
		pr.pause = func() func() {
			var addrs []string
			var mu sync.Mutex // the callback runs for every primary at once
			err := forEachPrimary(t.Context(), pr.RDB, func(_ context.Context, c *redis.Client) error {
				mu.Lock()
				defer mu.Unlock()
				addrs = append(addrs, c.Options().Addr)
				return nil
			})
			if err != nil {
				t.Fatalf("primaries: %v", err)
			}
			for _, a := range addrs {
				cl.Pause(t, a)
			}
			return func() {
				for _, a := range addrs {
					cl.Resume(t, a)
				}
			}
		}
		return pr
	}
	rc, url := startRedisContainer(t)
	return &pausableRedis{t: t, URL: url, RDB: newClient(t, url), pause: func() func() { return pauseContainer(t, rc) }}
}

// pauseFor stops Redis (every primary of a cluster) for d, then resumes it.
func (pr *pausableRedis) pauseFor(d time.Duration) {
	resume := pr.pause()
	time.Sleep(d) // the pause's length, not a bound on anything
	resume()
}

// killSubscribers kills every pub/sub connection of Redis (CLIENT KILL
// TYPE pubsub on every node), failing the test when there was none.
func (pr *pausableRedis) killSubscribers() {
	var killed atomic.Int64
	err := forEachNode(pr.t.Context(), pr.RDB, func(ctx context.Context, c *redis.Client) error {
		n, err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
		killed.Add(n)
		return err
	})
	if err != nil || killed.Load() < 1 {
		pr.t.Errorf("CLIENT KILL TYPE pubsub = %d, %v; want the subscribers' connections killed", killed.Load(), err)
	}
}

// watchEachInstance opens four watches of the election name, in turn on
// each of envs, and waits for each one's first state.
func watchEachInstance(t *testing.T, envs []*testEnv, name string) []*electionWatcher {
	t.Helper()
	var watchers []*electionWatcher
	for i := range 4 {
		watchers = append(watchers, watchElection(t, envs[i%len(envs)], name))
	}
	for i, ew := range watchers {
		eventually(t, time.Minute, fmt.Sprintf("watcher %d's first state", i), func() bool { return len(ew.seen()) > 0 })
	}
	return watchers
}

// awaitElected waits until ew has read n elected events, for at most a
// minute: the guard ends the wait, not the test, so a run beside it goes on.
func (ew *electionWatcher) awaitElected(n int) {
	end := time.Now().Add(time.Minute)
	for ew.elected() < n && time.Now().Before(end) && ew.t.Context().Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

// wantWatchersAtVacancy checks that every watcher reaches the state vacant
// after term, with its terms increasing on the way, and has read at least
// two elected events.
func wantWatchersAtVacancy(t *testing.T, watchers []*electionWatcher, term int64) {
	t.Helper()
	for i, ew := range watchers {
		who := fmt.Sprintf("watcher %d", i)
		eventually(t, time.Minute, who+" at the final state", func() bool {
			evs := ew.seen()
			return len(evs) > 0 && atVacancy(evs[len(evs)-1], term)
		})
		ew.wantTermsIncreasing(t, who)
		t.Logf("%s: %d events, %d elected", who, len(ew.seen()), ew.elected())
		if n := ew.elected(); n < 2 {
			t.Errorf("%s read %d elected events, want the run's leaders", who, n)
		}
	}
}
