package integration

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/redis/go-redis/v9"
)

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRateLimitRedisDown stops Redis under a running server: a fail-open
// policy allows with the degraded marker, a metric and one log line per
// interval; a fail-closed policy and inline limits answer 503. No decision
// waits much longer than the decision timeout.
func TestRateLimitRedisDown(t *testing.T) {
	c, url := startRedisContainer(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := serverClient(t, opts.Addr, outageTimeout)
	open := policy("open", ratelimit.FixedWindow, 100, time.Minute)
	closed := policy("closed", ratelimit.FixedWindow, 100, time.Minute)
	closed.Fail = ratelimit.FailClosed
	logs := &syncBuffer{}
	const decisionTimeout = 200 * time.Millisecond
	e := newTestEnv(t, withRedisClient(rdb, url), withPolicies(open, closed), withServiceConfig(func(s *serviceConfig) {
		s.RateLimit.Timeout = decisionTimeout
		s.RateLimit.LogInterval = time.Hour
		s.RateLimit.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	}))
	for _, p := range []string{"open", "closed"} {
		if r := e.do(t, "GET", "/v1/ratelimit/gate/"+p, ""); r.Status != 200 || r.Header.Get("Latchkey-RateLimit-Degraded") != "" {
			t.Fatalf("%s before the outage: %d %v", p, r.Status, r.Header)
		}
	}

	if err := c.Stop(t.Context(), nil); err != nil {
		t.Fatalf("stop redis: %v", err)
	}
	bound := hangFactor * decisionTimeout
	timed := func(method, path, body string) response {
		t.Helper()
		start := time.Now()
		r := e.do(t, method, path, body, "Accept", "application/json") // the gate's decision as JSON
		if took := time.Since(start); took > bound {
			t.Errorf("%s %s took %s with Redis down, want under %s", method, path, took, bound)
		}
		return r
	}
	const n = 5
	for i := 0; i < n; i++ {
		r := timed("GET", "/v1/ratelimit/gate/open", "")
		if r.Status != http.StatusOK || r.Header.Get("Latchkey-RateLimit-Degraded") != "store-unavailable" || !r.decision(t).Degraded {
			t.Fatalf("fail-open policy: %d %v %s, want 200 marked degraded", r.Status, r.Header, r.Body)
		}
		if r.Header.Get("RateLimit") == "" {
			t.Errorf("fail-open answer without RateLimit header")
		}
		r = timed("GET", "/v1/ratelimit/gate/closed", "")
		if r.Status != http.StatusServiceUnavailable || r.JSON(t)["type"] != "store-unavailable" {
			t.Fatalf("fail-closed policy: %d %s, want 503 store-unavailable", r.Status, r.Body)
		}
		r = timed("POST", "/v1/ratelimit/check", `{"key":"k","limit":3,"window":"10s"}`)
		if r.Status != http.StatusServiceUnavailable {
			t.Fatalf("inline limit: %d %s, want 503", r.Status, r.Body)
		}
	}
	if got := strings.Count(logs.String(), "fail open"); got != 1 {
		t.Errorf("fail-open warnings logged = %d after %d degraded decisions, want 1 per interval:\n%s", got, n, logs.String())
	}
	m := e.do(t, "GET", "/metrics", "")
	if want := `latchkey_ratelimit_fail_open_total{policy="open"} 5`; !strings.Contains(string(m.Body), want) {
		t.Errorf("metrics lack %q", want)
	}
}

// TestRateLimitSelfProtection limits a client's calls to Latchkey's own API
// when a self policy is configured; the gate stays unaffected.
func TestRateLimitSelfProtection(t *testing.T) {
	e := newTestEnv(t, withPolicies(policy("api", ratelimit.FixedWindow, 2, time.Minute), policy("gw", ratelimit.FixedWindow, 10, time.Minute)),
		withRouterConfig(func(h *handlers.Config) { h.RateLimit.SelfPolicy = "api" }))
	for i := 0; i < 2; i++ {
		if r := e.do(t, "GET", "/v1/locks/self", ""); r.Status != 200 {
			t.Fatalf("call %d: status = %d, want 200", i+1, r.Status)
		}
	}
	r := e.do(t, "GET", "/v1/locks/self", "")
	if r.Status != http.StatusTooManyRequests || r.JSON(t)["type"] != "rate-limited" {
		t.Fatalf("third call: %d %s, want 429 rate-limited", r.Status, r.Body)
	}
	if ra := retryAfter(t, r); ra < 59 || ra > 60 {
		t.Errorf("Retry-After = %d, want about 60", ra)
	}
	if got := r.Header.Get("RateLimit-Policy"); got != `"api";q=2;w=60` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	if r := e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"gw"}`); r.Status != http.StatusTooManyRequests || r.JSON(t)["type"] != "rate-limited" {
		t.Errorf("check while over the self limit: %d %s, want 429 rate-limited", r.Status, r.Body)
	}
	for i := 0; i < 3; i++ {
		if r := e.do(t, "GET", "/v1/ratelimit/gate/gw", ""); r.Status != 200 {
			t.Errorf("gate: status = %d, want 200 (the gate is not self-limited)", r.Status)
		}
	}
	if r := e.do(t, "GET", "/healthz", ""); r.Status != 200 {
		t.Errorf("healthz: status = %d, want 200 (only /v1 is self-limited)", r.Status)
	}
}

// TestRateLimitSelfProtectionOffByDefault checks that without a self policy
// nothing limits the API.
func TestRateLimitSelfProtectionOffByDefault(t *testing.T) {
	e := newTestEnv(t, withPolicies(policy("api", ratelimit.FixedWindow, 1, time.Minute)))
	for i := 0; i < 5; i++ {
		if r := e.do(t, "GET", "/v1/locks/free", ""); r.Status != 200 {
			t.Fatalf("call %d: status = %d, want 200", i+1, r.Status)
		}
	}
}
