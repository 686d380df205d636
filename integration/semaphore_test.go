package integration

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// semLeaseJSON is the SemaphoreLease schema of api/openapi.yaml.
type semLeaseJSON struct {
	Name      string         `json:"name"`
	Token     string         `json:"token"`
	Count     int64          `json:"count"`
	Permits   int64          `json:"permits"`
	Available int64          `json:"available"`
	Fence     int64          `json:"fence"`
	TTLMS     int64          `json:"ttl_ms"`
	ExpiresAt time.Time      `json:"expires_at"`
	Keepalive *keepaliveJSON `json:"keepalive"`
	WaitedMS  int64          `json:"waited_ms"` // present when the acquire waited
}

// semStateJSON is the SemaphoreState schema of api/openapi.yaml.
type semStateJSON struct {
	Name       string `json:"name"`
	Permits    int64  `json:"permits"`
	InUse      int64  `json:"in_use"`
	Available  int64  `json:"available"`
	Holders    int64  `json:"holders"`
	Waiters    int64  `json:"waiters"`
	Fair       bool   `json:"fair"`
	Fence      int64  `json:"fence"`
	Owned      *bool  `json:"owned"`
	LostReason string `json:"lost_reason"`
	Leases     []struct {
		Owner     string `json:"owner"`
		Count     int64  `json:"count"`
		TTLMS     int64  `json:"ttl_ms"`
		GrantedAt string `json:"granted_at"`
		ExpiresAt string `json:"expires_at"`
	} `json:"leases"`
	LeasesTruncated bool `json:"leases_truncated"`
	Lease           *struct {
		Count     int64          `json:"count"`
		Fence     int64          `json:"fence"`
		TTLMS     int64          `json:"ttl_ms"`
		ExpiresAt time.Time      `json:"expires_at"`
		Keepalive *keepaliveJSON `json:"keepalive"`
		Owner     string         `json:"owner"`
	} `json:"lease"`
}

func semPath(name string) string { return "/v1/semaphores/" + name }

// semAcquire takes permits of semaphore name (201 required).
func (e *testEnv) semAcquire(t testing.TB, name, body string, headerPairs ...string) semLeaseJSON {
	t.Helper()
	r := e.do(t, http.MethodPost, semPath(name), body, headerPairs...)
	wantStatus(t, r, http.StatusCreated)
	return decodeAs[semLeaseJSON](t, r)
}

// semState reads semaphore name, as the token when one is given.
func (e *testEnv) semState(t testing.TB, name string, headerPairs ...string) semStateJSON {
	t.Helper()
	r := e.do(t, http.MethodGet, semPath(name), "", headerPairs...)
	wantStatus(t, r, http.StatusOK)
	return decodeAs[semStateJSON](t, r)
}

// semRelease releases the lease of token on semaphore name (200 required).
func (e *testEnv) semRelease(t testing.TB, name, token string) {
	t.Helper()
	wantStatus(t, e.do(t, http.MethodDelete, semPath(name), "", "Lock-Token", token), http.StatusOK)
}

func TestSemaphoreOverHTTP(t *testing.T) {
	e := newTestEnv(t)
	a := e.semAcquire(t, "pool", `{"permits": 3, "count": 2, "ttl": "1m"}`)
	if a.Count != 2 || a.Permits != 3 || a.Available != 1 || a.Token == "" {
		t.Fatalf("lease = %+v, want 2 of 3 permits, 1 left, a token", a)
	}
	wantProblem(t, e.do(t, http.MethodPost, semPath("pool"), `{"permits": 4}`), 409, "permits-mismatch")
	r := e.do(t, http.MethodPost, semPath("pool"), `{"permits": 3, "count": 2}`)
	wantProblem(t, r, 409, "permits-unavailable")
	if got := retryAfter(t, r); got < 59 || got > 60 {
		t.Errorf("Retry-After = %d, want the holder's remaining minute", got)
	}
	wantProblem(t, e.do(t, http.MethodPost, semPath("pool"), `{"permits": 3}`, "Lock-Token", a.Token), 409, "token-in-use")
	st := e.semState(t, "pool", "Lock-Token", a.Token)
	if st.Permits != 3 || st.InUse != 2 || st.Available != 1 || st.Holders != 1 || st.Owned == nil || !*st.Owned ||
		st.Lease == nil || st.Lease.Count != 2 || st.Lease.Fence != a.Fence {
		t.Fatalf("state = %+v, want 3 permits, 2 in use by one lease the token owns", st)
	}
	renewed := decodeAs[semLeaseJSON](t, e.do(t, http.MethodPost, semPath("pool")+"/renew", `{"ttl": "2m"}`, "Lock-Token", a.Token))
	if renewed.TTLMS != 120000 || renewed.Token != "" || renewed.Fence != a.Fence {
		t.Errorf("renewed = %+v, want 2m, no token, the same fence", renewed)
	}

	// The admin grows the semaphore; the old capacity is refused from then on.
	wantStatus(t, e.do(t, http.MethodPut, semPath("pool"), `{"permits": 4}`), 403)
	grown := decodeAs[semStateJSON](t, e.do(t, http.MethodPut, semPath("pool"), `{"permits": 4}`, "Authorization", "Bearer "+testAdminKey))
	if grown.Permits != 4 || grown.Available != 2 {
		t.Fatalf("after PUT = %+v, want 4 permits, 2 free", grown)
	}
	wantProblem(t, e.do(t, http.MethodPost, semPath("pool"), `{"permits": 3}`), 409, "permits-mismatch")
	b := e.semAcquire(t, "pool", `{"permits": 4, "count": 2}`)
	if b.Fence <= a.Fence {
		t.Errorf("fence %d after %d, want it above", b.Fence, a.Fence)
	}

	// Force release: every lease goes, the fence is bumped, the owners learn why.
	wantStatus(t, e.do(t, http.MethodDelete, semPath("pool")+"?force=true", "", "Authorization", "Bearer "+testAdminKey), 204)
	st = e.semState(t, "pool", "Lock-Token", b.Token)
	if st.InUse != 0 || st.Holders != 0 || st.Fence <= b.Fence || st.LostReason != locks.LostForceReleased {
		t.Fatalf("after force release = %+v, want nothing held, a fence above %d, lost_reason force_released", st, b.Fence)
	}
	wantProblem(t, e.do(t, http.MethodDelete, semPath("pool"), "", "Lock-Token", a.Token), 404, "lease-not-found")
	c := e.semAcquire(t, "pool", `{"permits": 4, "count": 4}`)
	if c.Fence <= st.Fence {
		t.Errorf("fence after force release = %d, want above %d", c.Fence, st.Fence)
	}
	e.semRelease(t, "pool", c.Token)
}

// TestSemaphoreExpiredLeaseFreesItsPermits: a lease nobody releases gives
// its permits back when its TTL ends, on real Redis's clock, and its
// renewal and release then find nothing.
func TestSemaphoreExpiredLeaseFreesItsPermits(t *testing.T) {
	e := newTestEnv(t)
	a := e.semAcquire(t, "pool", `{"permits": 2, "count": 2, "ttl": "200ms"}`)
	eventually(t, 10*time.Second, "the expired lease's permits are back", func() bool {
		return e.semState(t, "pool").Available == 2
	})
	b := e.semAcquire(t, "pool", `{"permits": 2, "count": 2, "ttl": "1m"}`)
	if b.Fence <= a.Fence {
		t.Errorf("fence %d after %d", b.Fence, a.Fence)
	}
	wantProblem(t, e.do(t, http.MethodPost, semPath("pool")+"/renew", "", "Lock-Token", a.Token), 404, "lease-not-found")
	wantProblem(t, e.do(t, http.MethodDelete, semPath("pool"), "", "Lock-Token", a.Token), 404, "lease-not-found")
	e.semRelease(t, "pool", b.Token)
}

// TestSemaphoreFairBigRequestIsNotStarved: once a waiter for all the
// permits is queued, requests for the one free permit wait behind it, on
// either instance, and it is served first when the holder releases.
func TestSemaphoreFairBigRequestIsNotStarved(t *testing.T) {
	e1 := newTestEnv(t)
	e2 := newTestEnv(t, beside(e1))
	holder := e1.semAcquire(t, "pool", `{"permits": 4, "count": 3, "ttl": "1m", "fair": true}`)
	big := make(chan response, 1)
	go func() {
		big <- e2.send(t.Context(), http.MethodPost, semPath("pool"), `{"permits": 4, "count": 4, "ttl": "1m", "wait": "30s", "fair": true}`)
	}()
	eventually(t, 10*time.Second, "the big waiter is queued", func() bool { return e1.semState(t, "pool").Waiters == 1 })
	for _, e := range []*testEnv{e1, e2} {
		wantProblem(t, e.do(t, http.MethodPost, semPath("pool"), `{"permits": 4, "count": 1, "fair": true}`), 409, "permits-unavailable")
	}
	wantProblem(t, e1.do(t, http.MethodPost, semPath("pool"), `{"permits": 4, "count": 1}`), 409, "lock-mode-mismatch")
	small := make(chan response, 1)
	go func() {
		small <- e1.send(t.Context(), http.MethodPost, semPath("pool"), `{"permits": 4, "count": 1, "ttl": "1m", "wait": "30s", "fair": true}`)
	}()
	eventually(t, 10*time.Second, "the small waiter is queued behind", func() bool { return e1.semState(t, "pool").Waiters == 2 })
	e1.semRelease(t, "pool", holder.Token)
	r := <-big
	wantStatus(t, r, http.StatusCreated)
	bl := decodeAs[semLeaseJSON](t, r)
	if st := e1.semState(t, "pool"); st.InUse != 4 || st.Waiters != 1 {
		t.Fatalf("after the big waiter's grant: %+v, want 4 in use and the small waiter still waiting", st)
	}
	e2.semRelease(t, "pool", bl.Token)
	r = <-small
	wantStatus(t, r, http.StatusCreated)
	if f := r.Fence(); f <= bl.Fence {
		t.Errorf("small waiter's fence %d, want above the big one's %d", f, bl.Fence)
	}
}

// holdRecord is one client's acquisition in the invariant test, its times
// on one monotonic clock (offsets from the test's start).
type holdRecord struct {
	count            int64
	fence            int64
	sent, from, upto time.Duration // request sent, grant received, release about to be sent
	served           bool
}

// TestSemaphoreInvariantUnderConcurrency: 32 clients on one semaphore of 8
// permits, through two Latchkey instances, ask for 1 to 3 permits each,
// several times, waiting for them; a quarter of them crash while holding
// (they never release: their leases expire). Each records its hold from the
// grant's answer to the release it is about to send (a crashed one: to the
// request's send time plus its TTL), intervals that lie within the lease's
// real life. Never more than 8 permits are in use in those intervals, fences
// follow the order of grants, every request is served within its wait
// (expired holders never block anyone for longer than their TTL), and at the
// end nothing is held or waited for.
func TestSemaphoreInvariantUnderConcurrency(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			e1 := newTestEnv(t)
			envs := []*testEnv{e1, newTestEnv(t, beside(e1))}
			const (
				clients  = 32
				rounds   = 3
				permits  = 8
				crashTTL = 400 * time.Millisecond
				wait     = 30 * time.Second
			)
			start := time.Now()
			var mu sync.Mutex
			var records []holdRecord
			var wg sync.WaitGroup
			for i := range clients {
				wg.Go(func() {
					e := envs[i%2]
					count := int64(1 + i%3)
					crasher := i%4 == 3
					for round := range rounds {
						ttl := "20s"
						if crasher && round == rounds-1 {
							ttl = crashTTL.String()
						}
						body := fmt.Sprintf(`{"permits": %d, "count": %d, "ttl": %q, "wait": %q, "fair": %v}`, permits, count, ttl, wait, fair)
						rec := holdRecord{count: count, sent: time.Since(start)}
						r := e.send(t.Context(), http.MethodPost, semPath("inv"), body)
						rec.from = time.Since(start)
						if r.Err != nil || r.Status != http.StatusCreated {
							t.Errorf("client %d round %d: %d %s %v, want 201 within the wait", i, round, r.Status, r.Body, r.Err)
							return
						}
						if rec.from-rec.sent > wait+5*time.Second {
							t.Errorf("client %d: answered after %s, wait %s", i, rec.from-rec.sent, wait)
						}
						rec.fence, rec.served = r.Fence(), true
						if crasher && round == rounds-1 {
							rec.upto = rec.sent + crashTTL // it never releases
						} else {
							// the work done under the permits: a look at the semaphore
							st := envs[(i+1)%2].send(t.Context(), http.MethodGet, semPath("inv"), "")
							if st.Err != nil || st.Status != http.StatusOK {
								t.Errorf("client %d: GET %d %v", i, st.Status, st.Err)
							}
							rec.upto = time.Since(start)
							if rr := e.send(t.Context(), http.MethodDelete, semPath("inv"), "", "Lock-Token", r.Token()); rr.Status != http.StatusOK {
								t.Errorf("client %d: release %d %s", i, rr.Status, rr.Body)
							}
						}
						mu.Lock()
						records = append(records, rec)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			if len(records) != clients*rounds {
				t.Fatalf("%d acquisitions recorded, want %d", len(records), clients*rounds)
			}
			wantPermitsNeverExceeded(t, records, permits)
			wantFencesInGrantOrder(t, records)
			eventually(t, 10*time.Second, "nothing held or waited for", func() bool {
				st := e1.semState(t, "inv")
				return st.InUse == 0 && st.Holders == 0 && st.Waiters == 0
			})
		})
	}
}

// wantPermitsNeverExceeded sweeps the hold intervals: at no instant do the
// holds add up to more than permits. An end sorts before a start at the
// same instant (the intervals are inner bounds of the leases).
func wantPermitsNeverExceeded(t *testing.T, records []holdRecord, permits int64) {
	t.Helper()
	type edge struct {
		at    time.Duration
		delta int64
	}
	var edges []edge
	for _, r := range records {
		if r.upto <= r.from {
			continue // its lease ended before its grant was received: no inner interval
		}
		edges = append(edges, edge{r.from, r.count}, edge{r.upto, -r.count})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return int(a.delta - b.delta)
	})
	var inUse, most int64
	for _, e := range edges {
		inUse += e.delta
		if inUse > permits {
			t.Fatalf("%d permits in use at %s, want at most %d", inUse, e.at, permits)
		}
		most = max(most, inUse)
	}
	t.Logf("%d holds, at most %d of %d permits in use at once", len(records), most, permits)
}

// wantFencesInGrantOrder: a grant whose answer came before another request
// was sent has the smaller fence, and no two grants share one.
func wantFencesInGrantOrder(t *testing.T, records []holdRecord) {
	t.Helper()
	seen := map[int64]bool{}
	for _, a := range records {
		if seen[a.fence] {
			t.Errorf("fence %d issued twice", a.fence)
		}
		seen[a.fence] = true
		for _, b := range records {
			if a.from < b.sent && a.fence >= b.fence {
				t.Errorf("a grant answered at %s has fence %d, one requested later (%s) has %d", a.from, a.fence, b.sent, b.fence)
			}
		}
	}
}
