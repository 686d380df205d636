package integration

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMutualExclusion has 50 clients contend for one lock over HTTP for
// about three seconds. Each one that is granted the lock marks itself as a
// holder, holds briefly, unmarks itself and releases. No two may ever hold
// at once, and the fences seen in grant order must strictly increase. It
// runs with both ways cmd/server talks to Redis, one command per call and
// pipelined (its default).
func TestMutualExclusion(t *testing.T) {
	for _, c := range serverClients {
		t.Run(c.name, func(t *testing.T) {
			_, url := newRedis(t)
			testMutualExclusion(t, newTestEnv(t, withRedis(url), withServerClient(2*time.Second), withClient(c.wrap)))
		})
	}
}

func testMutualExclusion(t *testing.T, e *testEnv) {
	const (
		clients  = 50
		duration = 3 * time.Second
		name     = "contended"
	)
	// Keep connections alive between requests of the 50 clients.
	e.Client = &http.Client{Transport: &specTransport{t: t, router: loadSpecRouter(t),
		base: &http.Transport{MaxIdleConnsPerHost: clients}}}

	var (
		holders   atomic.Int32
		overlaps  atomic.Int32
		conflicts atomic.Int64
		mu        sync.Mutex
		fences    []int64 // in grant order: appended only by the one holder
	)
	end := time.Now().Add(duration)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(end) && !t.Failed() {
				// The TTL is short, yet far longer than a hold, so a lease
				// never expires under its holder.
				r := e.do(t, "POST", "/v1/locks/"+name, `{"ttl":"5s"}`)
				switch r.Status {
				case http.StatusConflict:
					conflicts.Add(1)
					if r.Header.Get("Retry-After") == "" {
						t.Errorf("409 without Retry-After: %s", r.Body)
					}
					// Retry-After is in whole seconds; contend again soon,
					// with jitter, as an impatient client would.
					time.Sleep(time.Duration(10+rand.IntN(20)) * time.Millisecond)
					continue
				case http.StatusCreated:
				default:
					t.Errorf("acquire: status %d, body %s", r.Status, r.Body)
					return
				}
				var l leaseJSON
				if err := json.Unmarshal(r.Body, &l); err != nil {
					t.Errorf("acquire: %v in %s", err, r.Body)
					return
				}
				if n := holders.Add(1); n > 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				fences = append(fences, l.Fence)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				holders.Add(-1)

				r = e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", l.Token)
				var rel releaseJSON
				if err := json.Unmarshal(r.Body, &rel); r.Status != http.StatusOK || err != nil || !rel.Released {
					t.Errorf("release: status %d, body %s, want 200 released", r.Status, r.Body)
					return
				}
			}
		})
	}
	wg.Wait()

	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d grants overlapped another holder", n)
	}
	if len(fences) == 0 {
		t.Fatal("no client was ever granted the lock")
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Errorf("grant %d has fence %d after %d: fences must strictly increase in grant order", i, fences[i], fences[i-1])
		}
	}
	if st := e.inspect(t, name); st.Held {
		t.Errorf("lock still held after every client released: %+v", st)
	}
	if got := metricValue(t, e, `latchkey_lock_grants_total{kind="new"}`); got != float64(len(fences)) {
		t.Errorf("latchkey_lock_grants_total{kind=\"new\"} = %v, want the %d grants the clients saw", got, len(fences))
	}
	if got := metricValue(t, e, "latchkey_lock_conflicts_total"); got != float64(conflicts.Load()) {
		t.Errorf("latchkey_lock_conflicts_total = %v, want the %d conflicts the clients saw", got, conflicts.Load())
	}
	t.Logf("%d grants, %d conflicts among %d clients in %s", len(fences), conflicts.Load(), clients, duration)
}
