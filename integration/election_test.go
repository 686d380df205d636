package integration

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/redis/go-redis/v9"
)

// electionLeaseJSON is the ElectionLease schema of api/openapi.yaml.
type electionLeaseJSON struct {
	Name      string         `json:"name"`
	Token     string         `json:"token"`
	Term      int64          `json:"term"`
	Fence     int64          `json:"fence"`
	Value     *string        `json:"value"`
	Owner     string         `json:"owner"`
	TTLMS     int64          `json:"ttl_ms"`
	ExpiresAt time.Time      `json:"expires_at"`
	Reentrant bool           `json:"reentrant"`
	Keepalive *keepaliveJSON `json:"keepalive"`
	WaitedMS  int64          `json:"waited_ms"` // present when the acquire waited
}

// leaderJSON is the Leader schema of api/openapi.yaml.
type leaderJSON struct {
	Value     string    `json:"value"`
	Term      int64     `json:"term"`
	Owner     string    `json:"owner"`
	Since     time.Time `json:"since"`
	TTLMS     int64     `json:"ttl_ms"`
	ExpiresAt time.Time `json:"expires_at"`
}

// electionStateJSON is the ElectionState schema of api/openapi.yaml.
type electionStateJSON struct {
	Name       string         `json:"name"`
	Leader     *leaderJSON    `json:"leader"`
	Term       int64          `json:"term"`
	Candidates int64          `json:"candidates"`
	Owned      *bool          `json:"owned"`
	Keepalive  *keepaliveJSON `json:"keepalive"`
	LostReason string         `json:"lost_reason"`
}

func electionPath(name string) string { return "/v1/elections/" + name }

// campaign campaigns for election name (201 required).
func (e *testEnv) campaign(t testing.TB, name, body string, headerPairs ...string) electionLeaseJSON {
	t.Helper()
	r := e.do(t, http.MethodPost, electionPath(name), body, headerPairs...)
	wantStatus(t, r, http.StatusCreated)
	return decodeAs[electionLeaseJSON](t, r)
}

// election reads election name, as the token when one is given.
func (e *testEnv) election(t testing.TB, name string, headerPairs ...string) electionStateJSON {
	t.Helper()
	r := e.do(t, http.MethodGet, electionPath(name), "", headerPairs...)
	wantStatus(t, r, http.StatusOK)
	if tok := r.Header.Get("Lock-Token"); tok != "" {
		t.Errorf("GET answered a Lock-Token header")
	}
	return decodeAs[electionStateJSON](t, r)
}

// TestElectionRoutes walks an election over HTTP, every answer checked
// against api/openapi.yaml: elected, refused with the leader's public
// state, proclaimed, renewed, resigned, forced, listed; GET never shows
// the token.
func TestElectionRoutes(t *testing.T) {
	e := newTestEnv(t)
	l := e.campaign(t, "db", `{"value": "10.0.0.7:5432", "ttl": "20s", "owner": "db-1"}`)
	if l.Token == "" || l.Term <= 0 || l.Fence != l.Term || l.Value == nil || *l.Value != "10.0.0.7:5432" || l.Owner != "db-1" || l.TTLMS != 20000 {
		t.Fatalf("campaign = %+v, want a token, a term, the value and owner, 20s", l)
	}

	r := e.do(t, http.MethodPost, electionPath("db"), `{"value": "10.0.0.8:5432"}`)
	p := wantProblem(t, r, http.StatusConflict, "election-held")
	if ra := retryAfter(t, r); ra < 1 || ra > 20 {
		t.Errorf("Retry-After = %d, want the leader's remaining TTL (at most 20)", ra)
	}
	held := r.JSON(t)["leader"].(map[string]any)
	if held["value"] != "10.0.0.7:5432" || int64(held["term"].(float64)) != l.Term || held["owner"] != "db-1" {
		t.Errorf("election-held leader = %v, want the leader's value, term, owner", held)
	}
	_ = p

	st := e.election(t, "db")
	if st.Leader == nil || st.Leader.Value != "10.0.0.7:5432" || st.Leader.Term != l.Term || st.Leader.Owner != "db-1" || st.Leader.TTLMS <= 0 || st.Owned != nil {
		t.Errorf("GET = %+v leader %+v, want the leader and no owned", st, st.Leader)
	}
	raw := e.do(t, http.MethodGet, electionPath("db"), "", "Lock-Token", l.Token)
	if strings.Contains(string(raw.Body), l.Token) || !strings.Contains(string(raw.Body), `"owned":true`) {
		t.Errorf("GET with the token = %s, want owned and never the token", raw.Body)
	}

	r = e.do(t, http.MethodPut, electionPath("db")+"/value", `{"value": "10.0.0.9:5432"}`, "Lock-Token", l.Token)
	wantStatus(t, r, http.StatusOK)
	if pl := decodeAs[electionLeaseJSON](t, r); pl.Term != l.Term || *pl.Value != "10.0.0.9:5432" || pl.Token != "" {
		t.Errorf("proclaim = %+v, want the same term, the new value, no token", pl)
	}
	wantProblem(t, e.do(t, http.MethodPut, electionPath("db")+"/value", `{"value": "x"}`, "Lock-Token", locks.NewToken()), http.StatusConflict, "not-owner")
	if v := e.election(t, "db").Leader.Value; v != "10.0.0.9:5432" {
		t.Errorf("value after proclaim = %q", v)
	}

	r = e.do(t, http.MethodPost, electionPath("db")+"/renew", `{"ttl": "30s"}`, "Lock-Token", l.Token)
	wantStatus(t, r, http.StatusOK)
	if rl := decodeAs[electionLeaseJSON](t, r); rl.Term != l.Term || rl.TTLMS != 30000 {
		t.Errorf("renew = %+v, want term %d and 30s", rl, l.Term)
	}

	items := e.listAll(t, "/v1/elections", url.Values{"prefix": {"d"}})
	if names := namesOf(items); len(names) != 1 || names[0] != "db" || items[0]["leader"] == nil || items[0]["token"] != nil {
		t.Errorf("listing = %v, want db with its leader and never a token", items)
	}

	wantStatus(t, e.do(t, http.MethodDelete, electionPath("db"), "", "Lock-Token", l.Token), http.StatusOK)
	if st := e.election(t, "db"); st.Leader != nil || st.Term != l.Term {
		t.Errorf("after resigning: %+v, want vacant with the last term", st)
	}
	wantProblem(t, e.do(t, http.MethodDelete, electionPath("db"), "", "Lock-Token", l.Token), http.StatusNotFound, "lease-not-found")
	wantProblem(t, e.do(t, http.MethodPut, electionPath("db")+"/value", `{"value": "x"}`, "Lock-Token", l.Token), http.StatusNotFound, "lease-not-found")

	next := e.campaign(t, "db", `{"keepalive": true}`)
	if next.Term <= l.Term {
		t.Errorf("next term %d, want above %d", next.Term, l.Term)
	}
	wantProblem(t, e.do(t, http.MethodDelete, electionPath("db")+"?force=true", ""), http.StatusForbidden, "forbidden")
	wantStatus(t, e.do(t, http.MethodDelete, electionPath("db")+"?force=true", "", "Authorization", "Bearer "+testAdminKey), http.StatusNoContent)
	if st := e.election(t, "db", "Lock-Token", next.Token); st.Leader != nil || st.LostReason != "force_released" {
		t.Errorf("after force: %+v, want vacant and force_released for the evicted token", st)
	}
	lost := e.listAll(t, "/v1/lost/elections", nil)
	if len(lost) != 1 || lost[0]["name"] != "db" || !strings.Contains(fmt.Sprint(lost[0]["leases"]), "force_released") {
		t.Errorf("lost elections = %v, want db force_released", lost)
	}
}

// TestElectionRefusalsChangeNothing: every refused election request
// leaves every key of the server byte for byte as it was (DUMP).
func TestElectionRefusalsChangeNothing(t *testing.T) {
	e := newTestEnv(t)
	l := e.campaign(t, "db", `{"value": "a", "keepalive": true, "heartbeat": "30s"}`)
	other := locks.NewToken()
	before := e.dumps(t)
	big := strings.Repeat("v", locks.MaxValueBytes+1)
	for _, tc := range []struct {
		desc         string
		method, path string
		body         string
		headers      []string
		status       int
		typ          string
	}{
		{"campaign while led", http.MethodPost, electionPath("db"), `{"value": "b"}`, nil, 409, "election-held"},
		{"campaign value too long", http.MethodPost, electionPath("db"), `{"value": "` + big + `"}`, nil, 400, "invalid-request"},
		{"campaign fair", http.MethodPost, electionPath("db"), `{"fair": true}`, nil, 400, "invalid-request"},
		{"proclaim by another", http.MethodPut, electionPath("db") + "/value", `{"value": "b"}`, []string{"Lock-Token", other}, 409, "not-owner"},
		{"proclaim value too long", http.MethodPut, electionPath("db") + "/value", `{"value": "` + big + `"}`, []string{"Lock-Token", l.Token}, 400, "invalid-request"},
		{"renew by another", http.MethodPost, electionPath("db") + "/renew", "", []string{"Lock-Token", other}, 409, "not-owner"},
		{"resign by another", http.MethodDelete, electionPath("db"), "", []string{"Lock-Token", other}, 409, "not-owner"},
		{"force without admin", http.MethodDelete, electionPath("db") + "?force=true", "", nil, 403, "forbidden"},
		{"force spelled TRUE", http.MethodDelete, electionPath("db") + "?force=TRUE", "", []string{"Authorization", "Bearer " + testAdminKey}, 400, "invalid-request"},
		{"force twice", http.MethodDelete, electionPath("db") + "?force=false&force=true", "", []string{"Authorization", "Bearer " + testAdminKey}, 400, "invalid-request"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			wantProblem(t, e.do(t, tc.method, tc.path, tc.body, tc.headers...), tc.status, tc.typ)
		})
	}
	if after := e.dumps(t); !maps.Equal(before, after) {
		t.Errorf("refused requests changed Redis: %d keys before, %d after", len(before), len(after))
	}
}

// TestElectionHold: a held campaign streams the leadership with its term and
// value, a waiting candidate is elected when the stream closes, and its
// term is above the first.
func TestElectionHold(t *testing.T) {
	e := newTestEnv(t)
	h := e.openHoldAt(t, electionPath("svc")+"/hold", `{"value": "worker-1", "ttl": "3s"}`)
	if h.Status != http.StatusOK {
		t.Fatalf("hold = %d %s", h.Status, h.Body)
	}
	ev := h.next(t, time.Minute, false)
	if ev.Name != "acquired" || ev.Data["value"] != "worker-1" || ev.Data["token"] == nil {
		t.Fatalf("first event = %+v, want acquired with the value and token", ev)
	}
	term := int64(ev.Data["term"].(float64))
	got := make(chan response, 1)
	go func() {
		got <- e.send(t.Context(), http.MethodPost, electionPath("svc"), `{"value": "worker-2", "wait": "50s"}`)
	}()
	eventually(t, time.Minute, "the candidate waits", func() bool { return e.election(t, "svc").Candidates == 1 })
	h.close()
	var r response
	select {
	case r = <-got:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("the candidate was not elected after the hold closed")
	}
	wantStatus(t, r, http.StatusCreated)
	if next := decodeAs[electionLeaseJSON](t, r); next.Term <= term || *next.Value != "worker-2" {
		t.Errorf("elected %+v, want worker-2 above term %d", next, term)
	}
}

// TestElectionMemory: a held election costs Redis no more than a held lock
// with a name of the same length (MEMORY USAGE of every key of the name, on
// real Redis), and its value no more than the value's bytes, its field's
// one-byte name and two listpack entry headers, rounded up to the
// allocator's 16-byte size class: the election's hash has no hold count,
// which pays for its keys' longer names.
func TestElectionMemory(t *testing.T) {
	e := newTestEnv(t)
	const n = 100
	perName := func(tag string) float64 {
		pattern := e.Prefix + "*{" + tag + "-*"
		total, keys := memoryOf(t, e.RDB, pattern)
		if len(keys) != 2*n { // the state and the fence counter of each name
			t.Fatalf("%d keys match %s, want %d", len(keys), pattern, 2*n)
		}
		return float64(total) / n
	}
	for i := range n {
		if _, err := e.Svc.Acquire(t.Context(), fmt.Sprintf("lk-%06d", i), locks.AcquireRequest{TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	lock := perName("lk")
	for _, value := range []string{"", "10.0.0.7:5432", "https://db-1.internal.example:5432/primary"} {
		tag := fmt.Sprintf("e%d", len(value)%10) // two characters, as lk
		for i := range n {
			if _, err := e.Svc.Campaign(t.Context(), fmt.Sprintf("%s-%06d", tag, i), locks.AcquireRequest{TTL: time.Minute, Value: value}); err != nil {
				t.Fatal(err)
			}
		}
		got := perName(tag)
		bound := lock
		if value != "" {
			bound += float64((len(value) + 3 + 15) / 16 * 16)
		}
		t.Logf("bytes per held name: lock %.0f, election with a %d-byte value %.0f (bound %.0f)", lock, len(value), got, bound)
		if got > bound {
			t.Errorf("an election with a %d-byte value costs %.0f bytes, a lock %.0f: want at most %.0f", len(value), got, lock, bound)
		}
	}
}

// TestElectionInvariantUnderConcurrency: 32 candidates campaign for one
// election through two Latchkey instances, keep-alive leaderships with a
// heartbeat, waiting in arrival order. Most lead briefly and resign; some
// crash while leading (they never resign nor send a heartbeat: the renewer
// stops and their leadership runs out); some abandon their campaign while
// waiting (the request is cancelled). Each leadership is recorded on one
// monotonic clock from the answer received to the resignation about to be
// sent (a crashed one: to its request's send time plus its TTL, which its
// lease outlives). Never two leaders at once, terms strictly increase in
// grant order, and at the end the election is vacant with nobody waiting.
func TestElectionInvariantUnderConcurrency(t *testing.T) {
	e1 := newTestEnv(t, withRenewer(0))
	envs := []*testEnv{e1, newTestEnv(t, beside(e1), withRenewer(0))}
	start := time.Now()
	records, abandoned := runElection(t, envs, "inv", electionRun{})
	if t.Failed() {
		return
	}
	t.Logf("%d leaderships, %d campaigns abandoned, in %s", len(records), abandoned, time.Since(start).Round(time.Millisecond))
	wantPermitsNeverExceeded(t, records, 1) // one permit: one leader
	wantFencesInGrantOrder(t, records)
	eventually(t, time.Minute, "the election vacant, nobody waiting", func() bool {
		st := e1.election(t, "inv")
		return st.Leader == nil && st.Candidates == 0
	})
}

// electionRun is what runs beside runElection's candidates.
type electionRun struct {
	// mid, when not nil, runs beside the candidates.
	mid func()
	// killed: the instance of every odd candidate (envs[1]) may die and
	// come back during the run. Its candidates then take a failed or
	// refused campaign as lost with it, and go on to their next round; a
	// leader whose resignation fails counts its leadership as lasting only
	// its TTL from its campaign's sending, all it knows of it.
	killed bool
}

// runElection runs TestElectionInvariantUnderConcurrency's candidates on
// election name over envs (their clients replaced by ones that check every
// answer against the spec), with run beside them; it returns once every
// candidate and run.mid are done, with each leadership's record and the
// number of campaigns abandoned.
func runElection(t *testing.T, envs []*testEnv, name string, run electionRun) ([]holdRecord, int) {
	t.Helper()
	for _, e := range envs {
		e.Client = &http.Client{Transport: &specTransport{t: t, router: loadSpecRouter(t),
			base: &http.Transport{MaxIdleConnsPerHost: 32}}}
	}
	const (
		candidates = 32
		rounds     = 2
		ttl        = time.Second
		wait       = 50 * time.Second
	)
	start := time.Now()
	var mu sync.Mutex
	var records []holdRecord
	abandoned := 0
	var wg sync.WaitGroup
	if run.mid != nil {
		wg.Go(run.mid)
	}
	var lost, unproven atomic.Int64
	for i := range candidates {
		wg.Go(func() {
			e := envs[i%len(envs)]
			crasher, abandoner := i%8 == 7, i%8 == 3
			for round := range rounds {
				body := fmt.Sprintf(`{"value": "c%d-r%d", "ttl": %q, "wait": %q, "keepalive": true, "heartbeat": %q, "max_hold": "1m"}`,
					i, round, ttl, wait, ttl)
				ctx := t.Context()
				if abandoner && round == 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 20*time.Millisecond)
					defer cancel()
				}
				rec := holdRecord{count: 1, sent: time.Since(start)}
				r := e.send(ctx, http.MethodPost, electionPath(name), body)
				rec.from = time.Since(start)
				if abandoner && round == 0 && r.Err != nil {
					mu.Lock()
					abandoned++
					mu.Unlock()
					continue // it gave up waiting: it leads nothing it knows of
				}
				mayDie := run.killed && i%len(envs) == 1
				if mayDie && (r.Err != nil || r.Status == http.StatusServiceUnavailable) {
					lost.Add(1)
					continue // its instance died under it
				}
				if r.Err != nil || r.Status != http.StatusCreated {
					t.Errorf("candidate %d round %d: %d %s %v, want 201 within the wait", i, round, r.Status, r.Body, r.Err)
					return
				}
				rec.fence, rec.served = r.Fence(), true
				if crasher && round == rounds-1 {
					rec.upto = rec.sent + ttl // it never resigns: its lease lives at least ttl from the grant
				} else {
					if st := envs[(i+1)%len(envs)].send(t.Context(), http.MethodGet, electionPath(name), ""); st.Status != http.StatusOK && !run.killed {
						t.Errorf("candidate %d: GET %d", i, st.Status)
					}
					rec.upto = time.Since(start)
					if rr := e.send(t.Context(), http.MethodDelete, electionPath(name), "", "Lock-Token", r.Token()); rr.Status != http.StatusOK {
						if !run.killed {
							t.Errorf("candidate %d: resign %d %s", i, rr.Status, rr.Body)
						}
						unproven.Add(1)
						rec.upto = min(rec.upto, rec.sent+ttl)
					}
				}
				mu.Lock()
				records = append(records, rec)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if run.killed {
		t.Logf("%d campaigns lost with their instance; %d leaderships not resigned, counted for their TTL", lost.Load(), unproven.Load())
	}
	return records, abandoned
}

// TestElectionTenantsAndScopes: an election is in its tenant's namespace,
// takes a place in the tenant's lease quota as a lock does, and needs the
// lock scopes (locks:write to campaign, admin to remove a leader); every
// refusal leaves Redis as it was.
func TestElectionTenantsAndScopes(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile("leases: 2, waiters: 2"))))
	a, b, admin := bearer(secretA), bearer(secretB), bearer(secretAdminA)
	la := e.campaign(t, "db", `{"value": "a-1", "ttl": "1m"}`, a...)
	lb := e.campaign(t, "db", `{"value": "b-1", "ttl": "1m"}`, b...)
	if st := e.election(t, "db", a...); st.Leader == nil || st.Leader.Value != "a-1" {
		t.Errorf("tenant a sees %+v, want its own leader a-1", st.Leader)
	}
	if st := e.election(t, "db", b...); st.Leader == nil || st.Leader.Value != "b-1" || lb.Term <= 0 {
		t.Errorf("tenant b sees %+v, want its own leader b-1", st.Leader)
	}
	e.acquire(t, "lock", `{"ttl":"1m"}`, a...) // a's second lease: its quota is full
	as := func(pairs ...string) []string { return append(append([]string{}, a...), pairs...) }
	wantRefusalsChangeNothing(t, e, []refusal{
		{"campaign past the quota", "POST", electionPath("other"), `{"ttl":"1m"}`, a, http.StatusTooManyRequests, "quota-exceeded"},
		{"campaign with a read-only key", "POST", electionPath("other"), `{"ttl":"1m"}`, admin, http.StatusForbidden, "forbidden"},
		{"proclaim with a read-only key", "PUT", electionPath("db") + "/value", `{"value":"x"}`, append(append([]string{}, admin...), "Lock-Token", la.Token), http.StatusForbidden, "forbidden"},
		{"force without admin", "DELETE", electionPath("db") + "?force=true", "", a, http.StatusForbidden, "forbidden"},
		{"another tenant's leader", "DELETE", electionPath("db"), "", append(append([]string{}, b...), "Lock-Token", la.Token), http.StatusConflict, "not-owner"},
		{"proclaim past the value bound", "PUT", electionPath("db") + "/value", `{"value":"` + strings.Repeat("x", locks.MaxValueBytes+1) + `"}`, as("Lock-Token", la.Token), http.StatusBadRequest, "invalid-request"},
	})
	wantStatus(t, e.do(t, "DELETE", electionPath("db")+"?force=true", "", admin...), http.StatusNoContent)
	if st := e.election(t, "db", b...); st.Leader == nil {
		t.Error("forcing tenant a's election removed tenant b's leader")
	}
	e.campaign(t, "other", `{"ttl":"1m"}`, a...) // the forced leadership's place was given back
}

// TestTermsAfterDataLoss: terms stay above every earlier term of the name
// when Redis lost the term counter (deleted, as after a restart that lost
// data) or kept it behind the terms handed out (a partial loss), and a
// removed leader's term is stale, on real Redis.
func TestTermsAfterDataLoss(t *testing.T) {
	e := newTestEnv(t)
	keys := locks.ElectionKeysOf(e.Prefix, "db")
	term := func() int64 {
		l := e.campaign(t, "db", `{"ttl":"10s"}`)
		wantStatus(t, e.do(t, http.MethodDelete, electionPath("db"), "", "Lock-Token", l.Token), http.StatusOK)
		return l.Term
	}
	first, second := term(), term()
	if second <= first {
		t.Fatalf("terms %d then %d, want increasing", first, second)
	}
	if err := e.RDB.Del(t.Context(), keys.Fence).Err(); err != nil {
		t.Fatal(err)
	}
	third := term()
	if third <= second {
		t.Errorf("term after the counter was lost = %d, want above %d", third, second)
	}
	if err := e.RDB.SetArgs(t.Context(), keys.Fence, first, redis.SetArgs{KeepTTL: true}).Err(); err != nil {
		t.Fatal(err)
	}
	fourth := term()
	if fourth <= third {
		t.Errorf("term after the counter went back to %d = %d, want above %d", first, fourth, third)
	}
	held := e.campaign(t, "db", `{"ttl":"1h"}`)
	wantStatus(t, e.do(t, http.MethodDelete, electionPath("db")+"?force=true", "", "Authorization", "Bearer "+testAdminKey), http.StatusNoContent)
	if next := term(); next <= held.Term {
		t.Errorf("term after the leader was removed = %d, want above the removed %d", next, held.Term)
	}
}

// TestElectionVacancyAfterTheLeadersInstanceDies: a keep-alive leader whose
// instance dies and who sends no heartbeat loses the leadership (the other
// instance's renewer stops at the missed heartbeat, and the lease runs out),
// a candidate waiting on the other instance is elected with a greater term,
// and the loss is recorded as a lock's is. A watcher on the other instance
// (with no periodic re-read to lean on) sees the dead leader's term go,
// as vacant or straight away as the next leader's elected, and then that
// leader with its term.
func TestElectionVacancyAfterTheLeadersInstanceDies(t *testing.T) {
	e1 := newTestEnv(t, withRenewer(0))
	e2 := newTestEnv(t, beside(e1), withRenewer(0), withWatchResync(time.Hour))
	leader := e1.campaign(t, "svc", `{"value": "on-e1", "ttl": "1s", "keepalive": true, "heartbeat": "1s", "max_hold": "1m"}`)
	w := e2.openElectionWatch(t, "svc")
	if ev := watchEvent(t, w); ev.Name != "state" {
		t.Fatalf("first watch event %s %v, want state", ev.Name, ev.Data)
	}
	got := make(chan response, 1)
	go func() {
		got <- e2.send(t.Context(), http.MethodPost, electionPath("svc"), `{"value": "on-e2", "wait": "50s"}`)
	}()
	eventually(t, time.Minute, "the candidate waits", func() bool { return e2.election(t, "svc").Candidates == 1 })
	e1.kill()
	var r response
	select {
	case r = <-got:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("the candidate was not elected after the leader's instance died")
	}
	wantStatus(t, r, http.StatusCreated)
	if next := decodeAs[electionLeaseJSON](t, r); next.Term <= leader.Term || *next.Value != "on-e2" {
		t.Errorf("elected %+v, want on-e2 above term %d", next, leader.Term)
	}
	next := decodeAs[electionLeaseJSON](t, r)
	for {
		ev := watchEvent(t, w)
		term, _ := ev.Data["term"].(float64)
		if ev.Name == "vacant" && int64(term) == leader.Term {
			continue // the dead leader's term ended
		}
		if ev.Name != "elected" || int64(term) != next.Term || ev.Data["value"] != "on-e2" {
			t.Fatalf("watch event %s %v after the leader's instance died, want vacant of term %d or elected on-e2 with term %d",
				ev.Name, ev.Data, leader.Term, next.Term)
		}
		break
	}
	if st := e2.election(t, "svc", "Lock-Token", leader.Token); st.LostReason != "heartbeat_missed" {
		t.Errorf("the dead leader's lost reason = %q, want heartbeat_missed", st.LostReason)
	}
	lost := e2.listAll(t, "/v1/lost/elections", nil)
	if len(lost) != 1 || !strings.Contains(fmt.Sprint(lost[0]["leases"]), "heartbeat_missed") {
		t.Errorf("lost elections = %v, want svc heartbeat_missed", lost)
	}
}

// TestElectionHoldLostToForce: a held leadership removed by an
// administrator ends its stream with "lost", reason force_released.
func TestElectionHoldLostToForce(t *testing.T) {
	e := newTestEnv(t)
	h := e.openHoldAt(t, electionPath("svc")+"/hold", `{"value": "worker-1", "ttl": "30s"}`)
	if h.Status != http.StatusOK {
		t.Fatalf("hold = %d %s", h.Status, h.Body)
	}
	if ev := h.next(t, time.Minute, false); ev.Name != "acquired" {
		t.Fatalf("first event = %+v, want acquired", ev)
	}
	wantStatus(t, e.do(t, http.MethodDelete, electionPath("svc")+"?force=true", "", "Authorization", "Bearer "+testAdminKey), http.StatusNoContent)
	ev := h.next(t, time.Minute, false)
	for ev.Name == "renewed" {
		ev = h.next(t, time.Minute, false)
	}
	if ev.Name != "lost" || ev.Data["reason"] != "force_released" {
		t.Errorf("event after the force = %+v, want lost force_released", ev)
	}
	if !h.ended(time.Minute) {
		t.Error("the stream did not end after lost")
	}
}
