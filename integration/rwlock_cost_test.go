package integration

import (
	"context"
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

// TestRWLockRequestCost: a read/write lock's request costs Redis a handful
// of commands, as the exclusive lock's does (counting those the scripts
// run, INFO commandstats on every primary, averaged over 100 requests so
// that the sampler's background reads are a fraction of one; an exact
// budget allows a tenth of a command a request for them, as the
// semaphore's do): a grant
// reads the state hash once and writes it once, reads the queue only when
// someone waits, and the readers one by one only once one may have expired.
// Before the readers' expiries were folded into the state hash a contended
// request cost 40 commands.
func TestRWLockRequestCost(t *testing.T) {
	e := newTestEnv(t)
	const n = 100
	const slack = 0.1 // a request's share of the background calls
	perRequest := func(requests int, do func(i int)) float64 {
		t.Helper()
		before := redisCalls(t, e.RDB)
		for i := range n {
			do(i)
		}
		after := redisCalls(t, e.RDB)
		var total int64
		for cmd, calls := range after {
			if !background(cmd) {
				total += calls - before[cmd]
			}
		}
		return float64(total) / float64(n*requests)
	}
	cycle := func(name, mode string) {
		r := e.do(t, "POST", "/v1/rwlocks/"+name, `{"mode":"`+mode+`","ttl":"30s"}`)
		wantStatus(t, r, http.StatusCreated)
		wantStatus(t, e.do(t, "DELETE", "/v1/rwlocks/"+name, "", "Lock-Token", r.Header.Get("Lock-Token")), http.StatusOK)
	}
	// A lock read by others: every reader's grant and release.
	others := e.do(t, "POST", "/v1/rwlocks/shared", `{"mode":"read","ttl":"1m"}`)
	wantStatus(t, others, http.StatusCreated)
	for _, c := range []struct {
		what string
		do   func(i int)
		most float64
	}{
		// a grant and a release of 6 each, with the script: a grant on a free
		// lock clears no fairness flag it does not find (6.5 before)
		{"a read lease taken and released on a free lock", func(int) { cycle("free-read", "read") }, 6},
		{"a write lease taken and released on a free lock", func(int) { cycle("free-write", "write") }, 6},
		{"a read lease taken and released beside another reader", func(int) { cycle("shared", "read") }, 8},
	} {
		if got := perRequest(2, c.do); got > c.most+slack {
			t.Errorf("%s: %.1f Redis commands a request, want at most %.0f", c.what, got, c.most)
		} else {
			t.Logf("%s: %.1f Redis commands a request", c.what, got)
		}
	}

	// Behind a writer with 8 writers queued: a reader's refused attempt
	// reads the queue once and registers nothing.
	w := e.do(t, "POST", "/v1/rwlocks/busy", `{"mode":"write","ttl":"1m"}`)
	wantStatus(t, w, http.StatusCreated)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { e.send(ctx, "POST", "/v1/rwlocks/busy", `{"mode":"write","ttl":"10s","wait":"60s"}`) })
	}
	eventually(t, 20*time.Second, "8 writers queued", func() bool {
		st := e.do(t, "GET", "/v1/rwlocks/busy", "").JSON(t)
		wt, _ := st["waiters"].(map[string]any)
		return wt != nil && wt["write"] == float64(8)
	})
	refused := perRequest(1, func(int) {
		wantStatus(t, e.do(t, "POST", "/v1/rwlocks/busy", `{"mode":"read","ttl":"10s"}`), http.StatusConflict)
	})
	if refused > 8 {
		t.Errorf("a read attempt behind a writer and 8 queued writers: %.1f Redis commands, want at most 8", refused)
	} else {
		t.Logf("a read attempt behind a writer and 8 queued writers: %.1f Redis commands", refused)
	}
	cancel()
	wg.Wait()
}
