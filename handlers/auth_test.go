package handlers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/auth"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
)

// testSecret is the secret of the test key with id, a b64token.
func testSecret(id string) string { return "secret-of-" + id + "-0123456789" }

func sha(secret string) string {
	s := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(s[:])
}

// mustKeySet parses a keys file with one tenant "acme" holding a key per
// scope (id = the scope with ':' as '-'), a key "acme-billing" with every
// scope restricted to billing:*, and an admin-section key "ops".
func mustKeySet(t testing.TB, quotas string) *auth.KeySet {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "tenants:\n  acme:\n    quotas: {%s}\n    keys:\n", quotas)
	for _, s := range auth.AllScopes {
		id := strings.ReplaceAll(string(s), ":", "-")
		fmt.Fprintf(&b, "      - {id: %s, sha256: %s, scopes: [%s]}\n", id, sha(testSecret(id)), s)
	}
	fmt.Fprintf(&b, "      - {id: acme-billing, sha256: %s, scopes: [locks:read, locks:write], names: [\"billing:*\", exact]}\n", sha(testSecret("acme-billing")))
	fmt.Fprintf(&b, "  other:\n    keys:\n      - {id: other, sha256: %s, scopes: [locks:read]}\n", sha(testSecret("other")))
	fmt.Fprintf(&b, "admin:\n  keys:\n    - {id: ops, sha256: %s, scopes: [admin, locks:read]}\n", sha(testSecret("ops")))
	b.WriteString("public_gate: [sidecar]\n")
	set, err := auth.Parse([]byte(b.String()))
	if err != nil {
		t.Fatalf("keys file: %v\n%s", err, b.String())
	}
	return set
}

// okService answers every call with a success, and records the tenant each
// lock call acted for.
func okService() (*fakeService, *[]string) {
	var mu sync.Mutex
	var tenants []string
	seen := func(ctx context.Context) {
		mu.Lock()
		defer mu.Unlock()
		tenants = append(tenants, store.TenantOf(ctx))
	}
	lease := locks.Lease{Name: "x", Token: strings.Repeat("t", 22), Fence: 1, HoldCount: 1, TTL: time.Second, ExpiresAt: time.Now().Add(time.Second)}
	return &fakeService{
		AcquireFn: func(ctx context.Context, name string, _ locks.AcquireRequest) (locks.Lease, error) {
			seen(ctx)
			l := lease
			l.Name = name
			return l, nil
		},
		RenewFn: func(ctx context.Context, name, _ string, _ time.Duration) (locks.Lease, error) {
			seen(ctx)
			return lease, nil
		},
		ReleaseFn: func(ctx context.Context, _, _ string) (locks.Released, error) {
			seen(ctx)
			return locks.Released{Released: true}, nil
		},
		ForceReleaseFn: func(ctx context.Context, _ string) (bool, error) { seen(ctx); return true, nil },
		InspectFn: func(ctx context.Context, name, _ string) (locks.LockState, error) {
			seen(ctx)
			return locks.LockState{Name: name}, nil
		},
		PolicyFn: func(name string) (ratelimit.Policy, error) {
			return ratelimit.Policy{Name: name, Key: "ip", DenyStatus: 429,
				Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 10, Window: time.Second}}, nil
		},
		CheckFn: func(_ context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
			return ratelimit.Decision{Allowed: true, Policy: "p", Key: req.Key, Limit: 10, Window: time.Second, Remaining: 9}, nil
		},
	}, &tenants
}

func authConfig(set *auth.KeySet) handlers.Config {
	return handlers.Config{AdminKey: "", Auth: handlers.AuthConfig{Keys: func() *auth.KeySet { return set }}}
}

// TestRouteScopes is the route × scope table: every /v1 route, with a key
// of each scope, is served only with the scope the route needs (else 403
// forbidden naming the scope), and never without a key (401).
func TestRouteScopes(t *testing.T) {
	token := strings.Repeat("t", 22)
	routes := []struct {
		method, target, body string
		scope                auth.Scope
	}{
		{http.MethodPost, "/v1/locks/orders", "{}", auth.ScopeLocksWrite},
		{http.MethodGet, "/v1/locks/orders", "", auth.ScopeLocksRead},
		{http.MethodDelete, "/v1/locks/orders", "", auth.ScopeLocksWrite},
		{http.MethodDelete, "/v1/locks/orders?force=true", "", auth.ScopeAdmin},
		{http.MethodPost, "/v1/locks/orders/renew", "{}", auth.ScopeLocksWrite},
		{http.MethodPost, "/v1/ratelimit/check", `{"policy":"p","key":"k"}`, auth.ScopeRateLimitCheck},
		{http.MethodGet, "/v1/ratelimit/policies", "", auth.ScopeRateLimitCheck},
		{http.MethodGet, "/v1/ratelimit/gate/api", "", auth.ScopeRateLimitGate},
		{http.MethodPost, "/v1/ratelimit/gate/api/some/path", "", auth.ScopeRateLimitGate},
		{"PROPFIND", "/v1/ratelimit/gate/api", "", auth.ScopeRateLimitGate},
	}
	set := mustKeySet(t, "")
	for _, rt := range routes {
		for _, have := range append([]auth.Scope{""}, auth.AllScopes...) {
			t.Run(fmt.Sprintf("%s %s with %q", rt.method, rt.target, have), func(t *testing.T) {
				fake, _ := okService()
				h := newTestRouter(t, fake, authConfig(set))
				headers := []string{"Lock-Token", token}
				if have != "" {
					headers = append(headers, "Authorization", "Bearer "+testSecret(strings.ReplaceAll(string(have), ":", "-")))
				}
				req := newRequest(rt.method, rt.target, rt.body, headers...)
				var rec *httptest.ResponseRecorder
				if have == rt.scope {
					rec = serveUnchecked(h, req) // the fake's answers are not all a real service's
				} else {
					rec = serve(t, h, req)
				}
				switch {
				case have == "":
					wantProblem(t, rec, req, http.StatusUnauthorized, "unauthenticated")
					if got := rec.Header().Get("WWW-Authenticate"); got != `Bearer realm="latchkey"` {
						t.Errorf("WWW-Authenticate = %q", got)
					}
				case have != rt.scope:
					p := wantProblem(t, rec, req, http.StatusForbidden, "forbidden")
					if !strings.Contains(p.Detail, string(rt.scope)) {
						t.Errorf("detail %q does not name the scope %s", p.Detail, rt.scope)
					}
					if got := rec.Header().Get("WWW-Authenticate"); !strings.Contains(got, `scope="`+string(rt.scope)+`"`) {
						t.Errorf("WWW-Authenticate = %q, want insufficient_scope naming %s", got, rt.scope)
					}
				default:
					if rec.Code >= 400 {
						t.Errorf("status = %d, want success (body %s)", rec.Code, rec.Body)
					}
				}
				if have != rt.scope && len(fake.Calls()) != 0 {
					t.Errorf("service calls = %v, want none", fake.Calls())
				}
			})
		}
	}
}

// TestEveryRouteHasAScope keeps the scope table in step with the router:
// every /v1 route the router serves is in it.
func TestEveryRouteHasAScope(t *testing.T) {
	routes := newTestRouter(t, &fakeService{}, handlers.Config{}).(chi.Routes)
	_ = chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if strings.HasPrefix(route, "/v1/") {
			if _, ok := handlers.RouteScope(method, route); !ok {
				t.Errorf("%s %s has no scope in routeScopes", method, route)
			}
		}
		return nil
	})
}

// TestAuthOpenWithoutKeys: without a key set nothing changes.
func TestAuthOpenWithoutKeys(t *testing.T) {
	fake, tenants := okService()
	h := newTestRouter(t, fake, handlers.Config{Auth: handlers.AuthConfig{Keys: func() *auth.KeySet { return nil }}})
	req := newRequest(http.MethodPost, "/v1/locks/orders", "{}")
	if rec := serve(t, h, req); rec.Code != http.StatusCreated {
		t.Fatalf("status = %d, want 201 (body %s)", rec.Code, rec.Body)
	}
	if len(*tenants) != 1 || (*tenants)[0] != "" {
		t.Errorf("tenants = %q, want the shared namespace", *tenants)
	}
}

func TestAuthTenantAndNames(t *testing.T) {
	set := mustKeySet(t, "")
	tests := []struct {
		name, key, lock string
		headers         []string
		status          int
		tenant          string
	}{
		{"tenant key acts for its tenant", "locks-write", "orders", nil, http.StatusCreated, "acme"},
		{"names prefix allows", "acme-billing", "billing:invoices", nil, http.StatusCreated, "acme"},
		{"names exact allows", "acme-billing", "exact", nil, http.StatusCreated, "acme"},
		{"names refuses others", "acme-billing", "orders", nil, http.StatusForbidden, ""},
		{"names refuses a longer exact", "acme-billing", "exact2", nil, http.StatusForbidden, ""},
		{"names are checked decoded", "acme-billing", "orders%3Abilling:x", nil, http.StatusForbidden, ""},
		{"a tenant key may not pick a tenant", "locks-write", "orders", []string{handlers.TenantHeader, "other"}, http.StatusForbidden, ""},
		{"an admin-section key picks a tenant", "ops", "orders", []string{handlers.TenantHeader, "other"}, http.StatusOK, "other"},
		{"an admin-section key, no tenant", "ops", "orders", nil, http.StatusOK, ""},
		{"an unknown tenant", "ops", "orders", []string{handlers.TenantHeader, "nobody"}, http.StatusForbidden, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake, tenants := okService()
			h := newTestRouter(t, fake, authConfig(set))
			method, body := http.MethodPost, "{}"
			if tt.key == "ops" {
				method, body = http.MethodGet, ""
			}
			headers := append([]string{"Authorization", "Bearer " + testSecret(tt.key)}, tt.headers...)
			req := newRequest(method, "/v1/locks/"+tt.lock, body, headers...)
			rec := serve(t, h, req)
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d (body %s)", rec.Code, tt.status, rec.Body)
			}
			if tt.status == http.StatusForbidden {
				wantProblem(t, rec, req, tt.status, "forbidden")
				return
			}
			if len(*tenants) != 1 || (*tenants)[0] != tt.tenant {
				t.Errorf("service acted for tenants %q, want [%q]", *tenants, tt.tenant)
			}
		})
	}
}

// TestAuthThrottle: an address that failed FailBurst times is refused with
// 429 even with a valid key, until the throttle's clock has refilled a
// token; other addresses are unaffected; a missing key is not a failure.
func TestAuthThrottle(t *testing.T) {
	set := mustKeySet(t, "")
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	cfg := authConfig(set)
	cfg.Auth.FailBurst, cfg.Auth.FailWindow, cfg.Auth.Now = 3, 30*time.Second, clock
	fake, _ := okService()
	h := newTestRouter(t, fake, cfg)
	get := func(addr, secret string) int {
		req := newRequest(http.MethodGet, "/v1/locks/orders", "")
		req.RemoteAddr = addr + ":1234"
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		rec := serve(t, h, req)
		if rec.Code == http.StatusTooManyRequests {
			wantProblem(t, rec, req, http.StatusTooManyRequests, "rate-limited")
			if rec.Header().Get("Retry-After") != "10" {
				t.Errorf("Retry-After = %q, want 10 (one token of a 3-per-30s bucket)", rec.Header().Get("Retry-After"))
			}
		}
		return rec.Code
	}
	good := testSecret("locks-read")
	for i := range 5 {
		if got := get("192.0.2.1", ""); got != http.StatusUnauthorized {
			t.Fatalf("request %d without a key: status %d, want 401 (a missing key is not counted)", i, got)
		}
	}
	for i := range 3 {
		if got := get("192.0.2.1", "wrong-secret"); got != http.StatusUnauthorized {
			t.Fatalf("failure %d: status %d, want 401", i, got)
		}
	}
	if got := get("192.0.2.1", good); got != http.StatusTooManyRequests {
		t.Errorf("valid key from a throttled address: status %d, want 429", got)
	}
	if got := get("192.0.2.2", good); got != http.StatusOK {
		t.Errorf("valid key from another address: status %d, want 200", got)
	}
	mu.Lock()
	now = now.Add(10 * time.Second) // one token back
	mu.Unlock()
	if got := get("192.0.2.1", good); got != http.StatusOK {
		t.Errorf("after one token's refill: status %d, want 200", got)
	}
}

// TestAuthRequestQuota: a tenant's request-rate quota is a token bucket of
// its own; a denial is 429 quota-exceeded with Retry-After.
func TestAuthRequestQuota(t *testing.T) {
	set := mustKeySet(t, "requests_per_second: 5")
	fake, _ := okService()
	var got []ratelimit.Request
	fake.CheckFn = func(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
		got = append(got, req)
		if store.TenantOf(ctx) != "acme" {
			t.Errorf("quota decided for tenant %q, want acme", store.TenantOf(ctx))
		}
		return ratelimit.Decision{Allowed: false, RetryAfter: 1500 * time.Millisecond}, nil
	}
	h := newTestRouter(t, fake, authConfig(set))
	req := newRequest(http.MethodGet, "/v1/locks/orders", "", "Authorization", "Bearer "+testSecret("locks-read"))
	rec := serve(t, h, req)
	wantProblem(t, rec, req, http.StatusTooManyRequests, "quota-exceeded")
	if rec.Header().Get("Retry-After") != "2" {
		t.Errorf("Retry-After = %q, want 2", rec.Header().Get("Retry-After"))
	}
	if len(got) != 1 || got[0].Using.Limit.Limit != 5 || got[0].Using.Limit.Algorithm != ratelimit.TokenBucket || got[0].Using.Window != time.Second {
		t.Errorf("quota requests = %+v, want one token-bucket decision of 5 per second", got)
	}
	// The other tenant has no request quota: no decision is asked for.
	got = nil
	req = newRequest(http.MethodGet, "/v1/locks/orders", "", "Authorization", "Bearer "+testSecret("other"))
	if rec := serve(t, h, req); rec.Code != http.StatusOK || len(got) != 0 {
		t.Errorf("other tenant: status %d, %d quota decisions; want 200 and none", rec.Code, len(got))
	}
}

// TestAuthPublicGate: a policy listed under public_gate answers without a
// key; others still need one.
func TestAuthPublicGate(t *testing.T) {
	set := mustKeySet(t, "")
	fake, _ := okService()
	h := newTestRouter(t, fake, authConfig(set))
	req := newRequest(http.MethodGet, "/v1/ratelimit/gate/sidecar", "")
	if rec := serve(t, h, req); rec.Code != http.StatusOK {
		t.Errorf("public gate: status %d, want 200", rec.Code)
	}
	req = newRequest(http.MethodGet, "/v1/ratelimit/gate/api", "")
	wantProblem(t, serve(t, h, req), req, http.StatusUnauthorized, "unauthenticated")
}

// TestAuthNeverEchoesTheSecret: no answer, header or log line carries a
// secret sent, good or bad.
func TestAuthNeverEchoesTheSecret(t *testing.T) {
	set := mustKeySet(t, "")
	var logs syncBuffer
	cfg := authConfig(set)
	cfg.Logger = newJSONLogger(&logs)
	fake, _ := okService()
	h := newTestRouter(t, fake, cfg)
	secrets := []string{testSecret("locks-read"), testSecret("ops"), "not-a-key-but-secret-all-the-same", "bad secret with spaces"}
	var answers strings.Builder
	for _, s := range secrets {
		for _, target := range []string{"/v1/locks/orders", "/v1/locks/orders?force=true"} {
			method := http.MethodGet
			if strings.Contains(target, "force") {
				method = http.MethodDelete
			}
			rec := serveUnchecked(h, newRequest(method, target, "", "Authorization", "Bearer "+s))
			fmt.Fprintf(&answers, "%v %s\n", rec.Header(), rec.Body)
		}
	}
	metrics := serveUnchecked(h, newRequest(http.MethodGet, "/metrics", "")).Body.String()
	if !strings.Contains(logs.String(), `"key_id":"ops"`) {
		t.Errorf("no admin action logged with key_id ops:\n%s", logs.String())
	}
	for _, s := range secrets {
		for what, text := range map[string]string{"answers": answers.String(), "logs": logs.String(), "metrics": metrics} {
			if strings.Contains(text, s) {
				t.Errorf("%s contain the secret %q", what, s)
			}
		}
	}
}

// TestUnknownRouteWithKeys: with API keys on, a path or method no route
// serves is the router's 404 or 405 whatever key is sent (none, a wrong
// one, one without admin, the admin's): the routes are public, and no
// scope is needed to learn that one does not exist. A wrong key sent there
// is no failed authentication, and nothing reaches the service, not even
// the tenant's request quota.
func TestUnknownRouteWithKeys(t *testing.T) {
	requests := []struct {
		method, target string
		status         int
		typ            string
	}{
		{http.MethodGet, "/v1/nope", http.StatusNotFound, "not-found"},
		{http.MethodPost, "/v1/locks/", http.StatusNotFound, "not-found"},
		{http.MethodDelete, "/v1/locks/?force=true", http.StatusNotFound, "not-found"},
		{http.MethodPatch, "/v1/locks/x", http.StatusMethodNotAllowed, "method-not-allowed"},
		{http.MethodGet, "/v1/locks/x/hold", http.StatusMethodNotAllowed, "method-not-allowed"},
		{http.MethodPut, "/v1/rwlocks/x", http.StatusMethodNotAllowed, "method-not-allowed"},
		{http.MethodDelete, "/v1/semaphores/x/renew?force=true", http.StatusMethodNotAllowed, "method-not-allowed"},
		{"PROPFIND", "/v1/locks/x", http.StatusMethodNotAllowed, "method-not-allowed"},
	}
	keys := map[string]string{"no key": "", "a wrong key": "not-a-key-0123456789",
		"a locks:read key": testSecret("locks-read"), "the admin's key": testSecret("ops")}
	set := mustKeySet(t, "requests_per_second: 5")
	for _, rq := range requests {
		for desc, secret := range keys {
			t.Run(rq.method+" "+rq.target+" with "+desc, func(t *testing.T) {
				cfg := authConfig(set)
				cfg.Auth.FailBurst = 1 // one wrong key would throttle the address
				fake, _ := okService()
				h := newTestRouter(t, fake, cfg)
				var headers []string
				if secret != "" {
					headers = []string{"Authorization", "Bearer " + secret}
				}
				for range 2 {
					req := newRequest(rq.method, rq.target, "", headers...)
					wantProblem(t, serve(t, h, req), req, rq.status, rq.typ)
				}
				if calls := fake.Calls(); len(calls) != 0 {
					t.Errorf("service calls = %v, want none", calls)
				}
			})
		}
	}
}

// TestRefusedRequestsLogTheirRoute: a request refused before it reaches
// its handler (no key, a key without the scope) is logged and counted
// under the route it asked for, not as "unmatched"; a path no route serves
// stays "unmatched".
func TestRefusedRequestsLogTheirRoute(t *testing.T) {
	set := mustKeySet(t, "")
	var logs syncBuffer
	cfg := authConfig(set)
	cfg.Logger = newJSONLogger(&logs)
	fake, _ := okService()
	h := newTestRouter(t, fake, cfg)
	for _, req := range []*http.Request{
		newRequest(http.MethodGet, "/v1/locks/orders", ""),
		newRequest(http.MethodDelete, "/v1/semaphores/orders?force=true", "", "Authorization", "Bearer "+testSecret("locks-write")),
		newRequest(http.MethodGet, "/v1/ratelimit/gate/api/x", ""),
		newRequest("PROPFIND", "/v1/ratelimit/gate/api", ""),
		newRequest(http.MethodGet, "/v1/nope", ""),
	} {
		serve(t, h, req)
	}
	type line struct {
		Method, Route string
		Status        float64
	}
	var got []line
	for _, rec := range logLines(t, logs.String()) {
		if rec["msg"] == "request" {
			got = append(got, line{rec["method"].(string), rec["route"].(string), rec["status"].(float64)})
		}
	}
	want := []line{
		{"GET", "/v1/locks/{name}", 401},
		{"DELETE", "/v1/semaphores/{name}", 403},
		{"GET", "/v1/ratelimit/gate/{policy}/*", 401},
		{"PROPFIND", "/v1/ratelimit/gate/{policy}", 401},
		{"GET", "unmatched", 404},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request log lines (-want +got):\n%s", diff)
	}
	metrics := serve(t, h, newRequest(http.MethodGet, "/metrics", "")).Body.String()
	for _, series := range []string{
		`latchkey_http_requests_total{method="GET",route="/v1/locks/{name}",status="401"} 1`,
		`latchkey_http_requests_total{method="DELETE",route="/v1/semaphores/{name}",status="403"} 1`,
		`latchkey_http_requests_total{method="GET",route="unmatched",status="404"} 1`,
	} {
		if !strings.Contains(metrics, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}
