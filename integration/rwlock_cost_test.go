package integration

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestRWLockAttemptCostDoesNotGrowWithItsQueue: with 40 writers queued on
// a read/write lock, one more attempt reads the queue's deadlines with one
// command, not one ZSCORE per queued waiter (80 for 40 waiters before), so
// a contended lock's attempts cost what an idle one's do. Counted with
// INFO commandstats on every primary (the sampler's background reads are
// what the margin is for).
func TestRWLockAttemptCostDoesNotGrowWithItsQueue(t *testing.T) {
	e := newTestEnv(t)
	r := e.do(t, "POST", "/v1/rwlocks/hot", `{"mode":"write","ttl":"1m"}`)
	wantStatus(t, r, http.StatusCreated)
	holder := r.Header.Get("Lock-Token")

	const queued = 40
	var wg sync.WaitGroup
	statuses := make(chan int, queued)
	for range queued {
		wg.Go(func() {
			// granted one after another once the holder goes, each
			// releasing at once, which wakes the next
			r := e.send(t.Context(), "POST", "/v1/rwlocks/hot", `{"mode":"write","ttl":"10s","wait":"60s"}`)
			if r.Status == http.StatusCreated {
				r = e.send(t.Context(), "DELETE", "/v1/rwlocks/hot", "", "Lock-Token", r.Header.Get("Lock-Token"))
			}
			statuses <- r.Status
		})
	}
	eventually(t, 20*time.Second, "40 writers queued", func() bool {
		st := e.do(t, "GET", "/v1/rwlocks/hot", "").JSON(t)
		w, _ := st["waiters"].(map[string]any)
		return w != nil && w["write"] == float64(queued)
	})

	before := redisCalls(t, e.RDB)
	wantStatus(t, e.do(t, "POST", "/v1/rwlocks/hot", `{"mode":"read","ttl":"1m"}`), http.StatusConflict)
	after := redisCalls(t, e.RDB)
	if n := after["zscore"] - before["zscore"]; n > 5 {
		t.Errorf("one attempt behind %d queued writers ran ZSCORE %d times, want a handful at most (not one per waiter)", queued, n)
	}
	if n := after["evalsha"] - before["evalsha"]; n < 1 {
		t.Errorf("the attempt ran no script (%d EVALSHA): the count is not of it", n)
	}

	wantStatus(t, e.do(t, "DELETE", "/v1/rwlocks/hot", "", "Lock-Token", holder), http.StatusOK)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != http.StatusOK {
			t.Errorf("a queued writer ended with %d, want granted and released (200)", s)
		}
	}
}
