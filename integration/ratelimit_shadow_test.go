package integration

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// gateAsk sends one gate request from a client goroutine (no t.Fatal there)
// and returns the status and headers.
func (e *testEnv) gateAsk(method, path string, headerPairs ...string) (int, http.Header, error) {
	req, err := http.NewRequest(method, e.URL+path, nil)
	if err != nil {
		return 0, nil, err
	}
	for i := 0; i+1 < len(headerPairs); i += 2 {
		req.Header.Set(headerPairs[i], headerPairs[i+1])
	}
	resp, err := e.Client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header, err
}

// counterOf reads the one Redis counter of this server's rate limits.
func (e *testEnv) counterOf(t *testing.T) int64 {
	t.Helper()
	keys := e.keys(t)
	if len(keys) != 1 {
		t.Fatalf("keys %v, want one rate-limit counter", keys)
	}
	n, err := e.RDB.Get(t.Context(), keys[0]).Int64()
	if err != nil {
		t.Fatalf("GET %s: %v", keys[0], err)
	}
	return n
}

// A shadow policy never denies: 32 clients sending N requests over a limit
// of L get N answers of 200, exactly N-L of them marked would-deny, the
// metric counts exactly N-L, and Redis holds exactly L (a would-deny consumes
// nothing, as a denial would not have).
func TestShadowPolicyNeverDeniesAndCountsWouldDenials(t *testing.T) {
	const clients, perClient, limit = 32, 10, 100
	shadow := policy("shadow", ratelimit.FixedWindow, limit, time.Hour)
	shadow.Shadow = true
	shadow.DenyStatus = 403
	e := newTestEnv(t, withPolicies(shadow))
	var ok, marked, wrong atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perClient {
				status, h, err := e.gateAsk(http.MethodHead, "/v1/ratelimit/gate/shadow")
				switch {
				case err != nil:
					t.Error(err)
					return
				case status != http.StatusOK || h.Get("Retry-After") != "":
					wrong.Add(1)
				default:
					ok.Add(1)
				}
				switch v := h.Get("Latchkey-Ratelimit-Shadow"); v {
				case "would-deny":
					marked.Add(1)
				case "":
				default:
					t.Errorf("shadow header %q", v)
				}
			}
		}()
	}
	wg.Wait()
	const n = clients * perClient
	if ok.Load() != n || wrong.Load() != 0 {
		t.Fatalf("%d allowed, %d other answers, want all %d allowed", ok.Load(), wrong.Load(), n)
	}
	if marked.Load() != n-limit {
		t.Errorf("%d would-deny marks, want exactly %d", marked.Load(), n-limit)
	}
	if got := metricValue(t, e, `latchkey_ratelimit_shadow_would_deny_total{policy="shadow"}`); got != n-limit {
		t.Errorf("would-deny metric = %v, want %d", got, n-limit)
	}
	if got := metricValue(t, e, `latchkey_ratelimit_decisions_total{policy="shadow",result="denied"}`); got != 0 {
		t.Errorf("denied metric = %v, want 0", got)
	}
	if got := e.counterOf(t); got != limit {
		t.Errorf("Redis counter = %d, want %d: would-denials must consume nothing", got, limit)
	}
	// Check with the policy's name answers the same way, as JSON.
	r := e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"shadow"}`)
	if d := r.decision(t); r.Status != http.StatusOK || !d.Allowed || r.Header.Get("Latchkey-Ratelimit-Shadow") != "would-deny" {
		t.Errorf("check: %d %s %v", r.Status, r.Body, r.Header)
	}
}

// The cost header spends exactly the given cost on the gate and on check
// with a named policy; a missing header costs the default; bad values are a
// 400 naming the header and spend nothing.
func TestCostHeaderSpendsExactly(t *testing.T) {
	p := policy("tokens", ratelimit.FixedWindow, 1000, time.Hour)
	p.Cost = ratelimit.CostSource{Header: "X-Tokens", Max: 500}
	e := newTestEnv(t, withPolicies(p))
	r := e.do(t, "GET", "/v1/ratelimit/gate/tokens", "", "X-Tokens", "300")
	if r.Status != http.StatusOK || r.Header.Get("RateLimit") != `"tokens";r=700;t=3600` {
		t.Fatalf("gate with 300: %d %q", r.Status, r.Header.Get("RateLimit"))
	}
	r = e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"tokens"}`, "X-Tokens", "250")
	if d := r.decision(t); r.Status != http.StatusOK || d.Remaining != 450 {
		t.Fatalf("check with 250: %d %s", r.Status, r.Body)
	}
	r = e.do(t, "GET", "/v1/ratelimit/gate/tokens", "") // no header: cost 1
	if r.Status != http.StatusOK || r.Header.Get("RateLimit") != `"tokens";r=449;t=3600` {
		t.Fatalf("gate without the header: %d %q", r.Status, r.Header.Get("RateLimit"))
	}
	// A body cost wins over the header on check.
	r = e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"tokens","cost":9}`, "X-Tokens", "400")
	if d := r.decision(t); d.Remaining != 440 {
		t.Fatalf("check with a body cost of 9: %s", r.Body)
	}
	for _, v := range []string{"0", "-5", "abc", "1.5", "501", "99999999999999999999999"} {
		for _, ask := range []func() response{
			func() response { return e.do(t, "GET", "/v1/ratelimit/gate/tokens", "", "X-Tokens", v) },
			func() response {
				return e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"tokens"}`, "X-Tokens", v)
			},
		} {
			pr := wantProblem(t, ask(), http.StatusBadRequest, "invalid-request")
			if len(pr.Errors) != 1 || pr.Errors[0].Field != "X-Tokens" || !strings.Contains(pr.Detail, "X-Tokens") {
				t.Errorf("X-Tokens: %q: %+v, want a problem naming the header", v, pr)
			}
		}
	}
	// Over what remains: denied, nothing spent.
	r = e.do(t, "GET", "/v1/ratelimit/gate/tokens", "", "X-Tokens", "441", "Accept", "application/json")
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("cost 441 with 440 left: %d", r.Status)
	}
	if got := e.counterOf(t); got != 300+250+1+9 {
		t.Errorf("Redis counter = %d, want exactly %d", got, 300+250+1+9)
	}
}

// Reloading under 32 clients: every answer is a 200 under one of the two
// sets (its RateLimit-Policy is one set's limit and window, never a mix), a
// bad file keeps the active set, and the counter of the unchanged key carries
// over every reload: Redis counts every request once.
func TestPolicyReloadUnderLoad(t *testing.T) {
	const clients, perClient = 32, 40
	setA := "policies:\n  api:\n    limit: 1000000\n    window: 1h\n  other:\n    limit: 1\n    window: 1m\n"
	setB := "policies:\n  api:\n    limit: 2000000\n    window: 2h\n"
	wantPolicy := map[string]bool{`"api";q=1000000;w=3600`: true, `"api";q=2000000;w=7200`: true}
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write := func(content string) {
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(setA)
	ps, err := loadPolicies(path)
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t, withPolicies(ps...))
	r, err := ratelimit.NewReloader(e.Svc.limitService, ratelimit.ReloaderConfig{Path: path,
		Read: func() ([]byte, error) { return os.ReadFile(path) }})
	if err != nil {
		t.Fatal(err)
	}

	var sent atomic.Int64
	stop := make(chan struct{})
	var flips sync.WaitGroup
	flips.Add(1)
	var applied atomic.Int64
	go func() {
		defer flips.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			content, want := setA, "1000000"
			if i%2 == 0 {
				content, want = setB, "2000000"
			}
			write(content)
			set, _, err := r.Reload(false)
			if err != nil {
				t.Errorf("reload %d: %v", i, err)
				return
			}
			if fmt.Sprint(set.Policies[0].Limit.Limit) != want {
				t.Errorf("reload %d: api limit %d, want %s", i, set.Policies[0].Limit.Limit, want)
				return
			}
			applied.Add(1)
			if i%5 == 4 { // a bad file now and then: refused, the set stays
				write("policies:\n  api:\n    limit: 0\n    window: 1h\n")
				if kept, changed, err := r.Reload(false); err == nil || changed || kept.Version != set.Version {
					t.Errorf("bad file: changed %v err %v, version %s, want %s kept", changed, err, kept.Version, set.Version)
					return
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each client keeps asking until some sets were applied while
			// it did: the answers straddle reloads however the machine
			// schedules the two.
			for i := 0; i < perClient || applied.Load() < 4; i++ {
				sent.Add(1)
				status, h, err := e.gateAsk(http.MethodGet, "/v1/ratelimit/gate/api")
				if err != nil {
					t.Error(err)
					return
				}
				if status != http.StatusOK {
					t.Errorf("status %d during reloads", status)
					return
				}
				if !wantPolicy[h.Get("RateLimit-Policy")] {
					t.Errorf("RateLimit-Policy %q is neither set's", h.Get("RateLimit-Policy"))
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	flips.Wait()
	if got := e.counterOf(t); got != sent.Load() {
		t.Errorf("Redis counter = %d, want %d: one count per request, kept over %d reloads", got, sent.Load(), applied.Load())
	}
	t.Logf("%d requests over %d reloads", sent.Load(), applied.Load())
	// The route shows the active set.
	resp := e.do(t, "GET", "/v1/ratelimit/policies", "")
	body := resp.JSON(t)
	if body["version"] != e.Svc.ActivePolicies().Version || len(body["policies"].([]any)) < 1 {
		t.Errorf("GET /v1/ratelimit/policies = %s", resp.Body)
	}
}

// A shadow limit of a multi-limit policy never denies: 3 instances × 32
// clients send N requests over its limit L; all are allowed, exactly N-L
// marked would-deny and counted so in the limit's metric, its counter holds
// exactly L (a would-deny consumes nothing from it) while the enforced
// limit counted all N.
func TestShadowLimitNeverDeniesAndCountsWouldDenials(t *testing.T) {
	const perClient, limit = 3, 100
	pol := ratelimit.Policy{Name: "trial", Limits: []ratelimit.NamedLimit{
		{Name: "enforced", Key: "ip", Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Limit: 100000, Window: time.Hour}},
		{Name: "new-cap", Key: "const", Shadow: true, Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: limit, Window: time.Hour}},
	}}
	envs := threeInstances(t, withPolicies(pol))
	var ok, marked atomic.Int64
	var wg sync.WaitGroup
	for i := range 32 * len(envs) {
		e := envs[i%len(envs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perClient {
				status, h, err := e.gateAsk(http.MethodHead, "/v1/ratelimit/gate/trial")
				switch {
				case err != nil:
					t.Error(err)
					return
				case status == http.StatusOK && h.Get("Retry-After") == "":
					ok.Add(1)
				default:
					t.Errorf("status %d, Retry-After %q", status, h.Get("Retry-After"))
				}
				if h.Get("Latchkey-Ratelimit-Shadow") == "would-deny" {
					marked.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	const n = 32 * 3 * perClient
	if ok.Load() != n || marked.Load() != n-limit {
		t.Fatalf("%d allowed, %d marked would-deny; want %d allowed, %d marked", ok.Load(), marked.Load(), n, n-limit)
	}
	var wouldDeny, allowed float64
	for _, e := range envs {
		m := metrics(t, e)
		wouldDeny += m[`latchkey_ratelimit_limit_decisions_total{limit="new-cap",policy="trial",result="would_deny"}`]
		allowed += m[`latchkey_ratelimit_limit_decisions_total{limit="enforced",policy="trial",result="allowed"}`]
		if got := m[`latchkey_ratelimit_limit_decisions_total{limit="enforced",policy="trial",result="denied"}`]; got != 0 {
			t.Errorf("enforced limit denied %v", got)
		}
	}
	if wouldDeny != n-limit || allowed != n {
		t.Errorf("metrics: new-cap would_deny %v, enforced allowed %v; want %d and %d", wouldDeny, allowed, n-limit, n)
	}
	e := envs[0]
	p, err := e.Svc.Policy("trial")
	if err != nil {
		t.Fatal(err)
	}
	key := e.Svc.Keys(p, []string{"127.0.0.1", ratelimit.ConstKey})[1]
	if got, err := e.RDB.Get(t.Context(), key).Int64(); err != nil || got != limit {
		t.Errorf("shadow limit's counter %d (%v), want %d: would-denials consume nothing", got, err, limit)
	}
}
