package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/auth"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
)

func perIP(deny int) ratelimit.Policy {
	return ratelimit.Policy{Name: "per-ip", Key: "ip", DenyStatus: deny, Fail: ratelimit.FailOpen,
		Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 3, Window: 10 * time.Second}}
}

// decisionFake answers every check with d (for the key it was asked about).
func decisionFake(pol ratelimit.Policy, d ratelimit.Decision) *fakeService {
	return &fakeService{
		PolicyFn: func(name string) (ratelimit.Policy, error) {
			if name != pol.Name {
				return ratelimit.Policy{}, &ratelimit.PolicyNotFoundError{Name: name}
			}
			return pol, nil
		},
		CheckFn: func(_ context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
			d.Key = req.Key
			return d, nil
		},
	}
}

func TestRateLimitHeaders(t *testing.T) {
	base := ratelimit.Decision{Policy: "per-ip", Limit: 3, Window: 10 * time.Second}
	allowed := base
	allowed.Allowed, allowed.Remaining, allowed.ResetAfter = true, 2, 9001*time.Millisecond
	denied := base
	denied.ResetAfter, denied.RetryAfter = 6200*time.Millisecond, 6201*time.Millisecond
	degraded := allowed
	degraded.Degraded = true
	subSecond := base
	subSecond.ResetAfter, subSecond.RetryAfter = 1*time.Millisecond, 2*time.Millisecond
	tests := []struct {
		name   string
		d      ratelimit.Decision
		legacy bool
		status int
		want   map[string]string // "" = header absent
	}{
		{"allowed", allowed, false, 200, map[string]string{
			"RateLimit-Policy": `"per-ip";q=3;w=10`, "RateLimit": `"per-ip";r=2;t=10`, "Retry-After": "",
			"Latchkey-RateLimit-Degraded": "", "X-RateLimit-Limit": ""}},
		{"denied: seconds rounded up", denied, false, 429, map[string]string{
			"RateLimit-Policy": `"per-ip";q=3;w=10`, "RateLimit": `"per-ip";r=0;t=7`, "Retry-After": "7"}},
		{"denied under a second: at least 1", subSecond, false, 429, map[string]string{
			"RateLimit": `"per-ip";r=0;t=1`, "Retry-After": "1"}},
		{"degraded", degraded, false, 200, map[string]string{"Latchkey-RateLimit-Degraded": "store-unavailable"}},
		{"legacy headers", denied, true, 429, map[string]string{
			"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestRouter(t, decisionFake(perIP(429), tt.d),
				handlers.Config{RateLimit: handlers.RateLimitConfig{LegacyHeaders: tt.legacy}})
			rec := serve(t, h, newRequest("GET", "/v1/ratelimit/gate/per-ip", ""))
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, tt.status, rec.Body)
			}
			for name, want := range tt.want {
				if got := rec.Header().Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

func TestCheckRateLimitDecisionBody(t *testing.T) {
	d := ratelimit.Decision{Policy: "per-ip", Limit: 3, Window: 10 * time.Second,
		ResetAfter: 4500 * time.Millisecond, RetryAfter: 4501 * time.Millisecond}
	fake := decisionFake(perIP(403), d)
	var got ratelimit.Request
	check := fake.CheckFn
	fake.CheckFn = func(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
		got = req
		return check(ctx, req)
	}
	h := newTestRouter(t, fake, handlers.Config{})
	rec := serve(t, h, newRequest("POST", "/v1/ratelimit/check", `{"policy":"per-ip","key":"user:1","cost":2}`))
	if rec.Code != http.StatusTooManyRequests {
		t.Fatalf("status = %d, want 429 (a check denial is always 429, whatever the gate's deny status)", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"allowed": false, "limit": 3.0, "remaining": 0.0, "reset_ms": 4500.0,
		"retry_after_ms": 4501.0, "policy": "per-ip", "key": "user:1"}
	if diff := cmp.Diff(want, body); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ratelimit.Request{Policy: "per-ip", Key: "user:1", Cost: 2, Using: perIP(403)}, got); diff != "" {
		t.Errorf("service request (-want +got):\n%s", diff)
	}
}

func TestGateRateLimit(t *testing.T) {
	denied := ratelimit.Decision{Policy: "per-ip", Limit: 3, Window: 10 * time.Second, RetryAfter: time.Second}
	tests := []struct {
		name    string
		pol     ratelimit.Policy
		d       ratelimit.Decision
		path    string
		method  string
		status  int
		typ     string
		wantKey string
	}{
		{"allowed", perIP(429), ratelimit.Decision{Allowed: true, Policy: "per-ip"}, "/v1/ratelimit/gate/per-ip", "GET", 200, "", "192.0.2.1"},
		{"denied 429", perIP(429), denied, "/v1/ratelimit/gate/per-ip", "POST", 429, "", "192.0.2.1"},
		{"denied with the policy's 403", perIP(403), denied, "/v1/ratelimit/gate/per-ip", "OPTIONS", 403, "", "192.0.2.1"},
		{"unknown policy", perIP(429), denied, "/v1/ratelimit/gate/other", "GET", 404, "policy-not-found", ""},
		{"a WebDAV method", perIP(429), ratelimit.Decision{Allowed: true, Policy: "per-ip"}, "/v1/ratelimit/gate/per-ip", "PROPFIND", 200, "", "192.0.2.1"},
		{"TRACE, denied", perIP(429), denied, "/v1/ratelimit/gate/per-ip/app/path", "TRACE", 429, "", "192.0.2.1"},
		{"a WebDAV method, unknown policy", perIP(429), denied, "/v1/ratelimit/gate/other/x", "MKCOL", 404, "policy-not-found", ""},
		{"no policy named", perIP(429), denied, "/v1/ratelimit/gate/", "PROPFIND", 405, "method-not-allowed", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestRouter(t, decisionFake(tt.pol, tt.d), handlers.Config{})
			rec := serve(t, h, newRequest(tt.method, tt.path, "", "Accept", "application/json"))
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, tt.status, rec.Body)
			}
			var body map[string]any
			_ = json.Unmarshal(rec.Body.Bytes(), &body)
			if tt.typ != "" && body["type"] != tt.typ {
				t.Errorf("type = %v, want %s", body["type"], tt.typ)
			}
			if tt.wantKey != "" && body["key"] != tt.wantKey {
				t.Errorf("key = %v, want %s", body["key"], tt.wantKey)
			}
		})
	}
}

// TestGateAnswerBody: the gate answers without a body unless the request
// asks for JSON, so that nginx, which never reads an auth subrequest's body,
// can keep its connection; a denial without Accept JSON is a problem for the
// client behind Traefik or Envoy; HEAD never carries a body. Every answer
// carries the RateLimit headers.
func TestGateAnswerBody(t *testing.T) {
	allowed := ratelimit.Decision{Allowed: true, Policy: "per-ip", Limit: 3, Remaining: 2, Window: 10 * time.Second,
		ResetAfter: 9 * time.Second}
	denied := ratelimit.Decision{Policy: "per-ip", Limit: 3, Window: 10 * time.Second,
		ResetAfter: 6 * time.Second, RetryAfter: 6 * time.Second}
	const (
		none     = ""
		decision = "application/json"
		problem  = "application/problem+json"
	)
	tests := []struct {
		name   string
		method string
		accept string
		d      ratelimit.Decision
		status int
		body   string // the Content-Type of the body, none for no body
	}{
		{"allowed, no Accept", "GET", "", allowed, 200, none},
		{"allowed, curl's */*", "GET", "*/*", allowed, 200, none},
		{"allowed, a browser's Accept", "GET", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", allowed, 200, none},
		{"allowed, application/*", "POST", "application/*", allowed, 200, none},
		{"allowed, JSON refused with q=0", "GET", "text/plain, application/json;q=0", allowed, 200, none},
		{"allowed, Accept JSON", "GET", "application/json", allowed, 200, decision},
		{"allowed, JSON among others", "PUT", "text/plain;q=0.5, Application/JSON; q=0.1", allowed, 200, decision},
		{"allowed, HEAD asking for JSON", "HEAD", "application/json", allowed, 200, none},
		{"denied, no Accept", "GET", "", denied, 429, problem},
		{"denied, problem+json", "GET", "application/problem+json", denied, 429, problem},
		{"denied, Accept JSON", "GET", "application/json", denied, 429, decision},
		{"denied, HEAD", "HEAD", "", denied, 429, none},
		{"denied, HEAD asking for JSON", "HEAD", "application/json", denied, 429, none},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestRouter(t, decisionFake(perIP(429), tt.d), handlers.Config{})
			rec := serve(t, h, newRequest(tt.method, "/v1/ratelimit/gate/per-ip", "", "Accept", tt.accept))
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, tt.status, rec.Body)
			}
			if got := rec.Header().Get("RateLimit-Policy"); got != `"per-ip";q=3;w=10` {
				t.Errorf("RateLimit-Policy = %q", got)
			}
			if got := rec.Header().Get("RateLimit"); got == "" {
				t.Error("RateLimit header missing")
			}
			if got := rec.Header().Get("Retry-After"); (got != "") != !tt.d.Allowed {
				t.Errorf("Retry-After = %q on allowed=%v", got, tt.d.Allowed)
			}
			ct := rec.Header().Get("Content-Type")
			switch tt.body {
			case none:
				if rec.Body.Len() != 0 || ct != "" {
					t.Errorf("Content-Type %q body %q, want no body", ct, rec.Body)
				}
				if tt.method != "HEAD" && rec.Header().Get("Content-Length") != "0" {
					t.Errorf("Content-Length = %q, want 0", rec.Header().Get("Content-Length"))
				}
			case decision:
				var body map[string]any
				if err := json.Unmarshal(rec.Body.Bytes(), &body); ct != decision || err != nil {
					t.Fatalf("Content-Type %q body %q, want the decision JSON", ct, rec.Body)
				}
				if body["allowed"] != tt.d.Allowed || body["key"] != "192.0.2.1" || body["policy"] != "per-ip" {
					t.Errorf("decision = %v", body)
				}
			case problem:
				p := wantProblem(t, rec, newRequest(tt.method, "/v1/ratelimit/gate/per-ip", ""), tt.status, "rate-limited")
				if !strings.Contains(p.Detail, "retry after 6s") || !strings.Contains(p.Detail, `"per-ip"`) {
					t.Errorf("detail = %q, want the policy and when to retry", p.Detail)
				}
			}
		})
	}
}

func TestSelfProtection(t *testing.T) {
	denied := ratelimit.Decision{Policy: "api", Limit: 1, Window: time.Minute, RetryAfter: 30 * time.Second}
	pol := ratelimit.Policy{Name: "api", Key: "ip", DenyStatus: 429}
	fake := decisionFake(pol, denied)
	fake.InspectFn = func(context.Context, string, string) (locks.LockState, error) { return locks.LockState{}, nil }
	h := newTestRouter(t, fake, handlers.Config{RateLimit: handlers.RateLimitConfig{SelfPolicy: "api"}})
	rec := serve(t, h, newRequest("GET", "/v1/locks/x", ""))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "30" {
		t.Fatalf("status = %d Retry-After %q, want 429 and 30", rec.Code, rec.Header().Get("Retry-After"))
	}
	var p handlers.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Type != "rate-limited" {
		t.Errorf("body %s, want a rate-limited problem", rec.Body)
	}
	if calls := fake.Calls(); cmp.Diff([]string{"Check"}, calls) != "" {
		t.Errorf("calls = %v, want only the self check (the lock was not inspected)", calls)
	}
}

// The anonymous policy protects an open API from callers beyond loopback
// only: a loopback client, a caller of an API with keys (authentication
// answers it), and every caller once a self-protection policy is set (that
// one applies instead) are not checked against it.
func TestAnonymousSelfProtection(t *testing.T) {
	denied := ratelimit.Decision{Policy: "anonymous", Limit: 100, Window: time.Second, RetryAfter: time.Second}
	tests := []struct {
		name       string
		remote     string
		keys       bool   // a key set is active
		self       string // the self-protection policy
		wantStatus int
		wantCheck  string // the policy checked, "" for none
	}{
		{"anonymous beyond loopback", "192.0.2.1:1234", false, "", http.StatusTooManyRequests, "anonymous"},
		{"anonymous IPv6 beyond loopback", "[2001:db8::1]:1234", false, "", http.StatusTooManyRequests, "anonymous"},
		{"loopback", "127.0.0.1:1234", false, "", http.StatusOK, ""},
		{"IPv6 loopback", "[::1]:1234", false, "", http.StatusOK, ""},
		{"API keys on", "192.0.2.1:1234", true, "", http.StatusUnauthorized, ""},
		{"self-protection policy set", "127.0.0.1:1234", false, "api", http.StatusTooManyRequests, "api"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var checked []string
			fake := &fakeService{
				CheckFn: func(_ context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
					checked = append(checked, req.Policy)
					d := denied
					d.Policy, d.Key = req.Policy, req.Key
					return d, nil
				},
				InspectFn: func(context.Context, string, string) (locks.LockState, error) { return locks.LockState{}, nil },
			}
			cfg := handlers.Config{RateLimit: handlers.RateLimitConfig{AnonymousPolicy: "anonymous", SelfPolicy: tt.self}}
			if tt.keys {
				set := mustKeySet(t, "")
				cfg.Auth.Keys = func() *auth.KeySet { return set }
			}
			req := newRequest("GET", "/v1/locks/x", "")
			req.RemoteAddr = tt.remote
			rec := serve(t, newTestRouter(t, fake, cfg), req)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %s)", rec.Code, tt.wantStatus, rec.Body)
			}
			want := []string{}
			if tt.wantCheck != "" {
				want = []string{tt.wantCheck}
			}
			if diff := cmp.Diff(want, append([]string{}, checked...)); diff != "" {
				t.Errorf("policies checked (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCheckQuotaRequests: peek and a negative cost reach the service as
// they are; a cost of 0 is a 400 naming cost that asks nothing of it.
func TestCheckQuotaRequests(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		want       ratelimit.Request
	}{
		{"peek", `{"policy":"per-ip","key":"k","peek":true}`, ratelimit.Request{Policy: "per-ip", Key: "k", Peek: true}},
		{"refund", `{"policy":"per-ip","key":"k","cost":-2}`, ratelimit.Request{Policy: "per-ip", Key: "k", Cost: -2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got ratelimit.Request
			fake := decisionFake(perIP(429), ratelimit.Decision{Allowed: true, Policy: "per-ip", Limit: 3})
			check := fake.CheckFn
			fake.CheckFn = func(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
				got = req
				return check(ctx, req)
			}
			rec := serve(t, newTestRouter(t, fake, handlers.Config{}), newRequest("POST", "/v1/ratelimit/check", tt.body))
			if rec.Code != 200 {
				t.Fatalf("status = %d, want 200; body %s", rec.Code, rec.Body)
			}
			got.Using = ratelimit.Policy{}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
	fake := decisionFake(perIP(429), ratelimit.Decision{})
	req := newRequest("POST", "/v1/ratelimit/check", `{"policy":"per-ip","key":"k","cost":0}`)
	rec := serve(t, newTestRouter(t, fake, handlers.Config{}), req)
	wantProblem(t, rec, req, 400, "invalid-request")
	if !strings.Contains(rec.Body.String(), `"field":"cost"`) {
		t.Errorf("body %s does not name cost", rec.Body)
	}
}

// TestResetRateLimitKey: the reset of a key needs the admin credential,
// checked before the service is asked, and answers the counters deleted.
func TestResetRateLimitKey(t *testing.T) {
	var got []string
	fake := &fakeService{ResetKeyFn: func(_ context.Context, policy, key string) (int64, error) {
		got = append(got, policy, key)
		return 2, nil
	}}
	h := newTestRouter(t, fake, handlers.Config{AdminKey: adminKey})
	req := newRequest("DELETE", "/v1/ratelimit/policies/api/keys/user:42", "")
	wantProblem(t, serve(t, h, req), req, 403, "forbidden")
	if got != nil {
		t.Fatalf("the service was asked %v without the admin credential", got)
	}
	req = newRequest("DELETE", "/v1/ratelimit/policies/api/keys/user:42", "")
	req.Header.Set("Authorization", "Bearer "+adminKey)
	rec := serve(t, h, req)
	if rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != `{"policy":"api","key":"user:42","counters":2}` {
		t.Fatalf("status %d, body %s", rec.Code, rec.Body)
	}
	if !cmp.Equal(got, []string{"api", "user:42"}) {
		t.Errorf("service asked %v, want api user:42", got)
	}
	got = nil
	req = newRequest("DELETE", "/v1/ratelimit/policies/api/keys/path%2Fa%25b", "")
	req.Header.Set("Authorization", "Bearer "+adminKey)
	serve(t, h, req)
	if !cmp.Equal(got, []string{"api", "path/a%b"}) {
		t.Errorf("an encoded key reached the service as %v, want api path/a%%b", got)
	}
}
