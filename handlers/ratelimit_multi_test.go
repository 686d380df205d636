package handlers_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// multiPolicy has a limit of every key source.
var multiPolicy = ratelimit.Policy{Name: "api", DenyStatus: 429, Fail: ratelimit.FailOpen, Limits: []ratelimit.NamedLimit{
	{Name: "per-ip", Key: "ip", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 10, Window: time.Second}},
	{Name: "per-key", Key: "header:X-Api-Key", Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Limit: 1000, Window: time.Minute}},
	{Name: "global", Key: "const", Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 50000, Window: time.Minute}},
	{Name: "per-path", Key: "path", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 5, Window: 90 * time.Second}},
}}

// multiDecision is a decision under multiPolicy bound by limit b.
func multiDecision(allowed bool, b int) ratelimit.Decision {
	d := ratelimit.Decision{Allowed: allowed, Policy: "api", Limits: []ratelimit.LimitDecision{
		{Name: "per-ip", Limit: 10, Window: time.Second, Allowed: true, Remaining: 7, ResetAfter: 500 * time.Millisecond},
		{Name: "per-key", Limit: 1000, Window: time.Minute, Allowed: true, Remaining: 2, ResetAfter: 30 * time.Second},
		{Name: "global", Limit: 50000, Window: time.Minute, Allowed: true, Remaining: 40000, ResetAfter: 12 * time.Second},
		{Name: "per-path", Limit: 5, Window: 90 * time.Second, Allowed: true, Remaining: 3, ResetAfter: 80 * time.Second},
	}}
	if !allowed {
		d.Limits[b].Allowed, d.Limits[b].Remaining, d.Limits[b].RetryAfter = false, 0, 41500*time.Millisecond
	}
	l := d.Limits[b]
	d.Binding, d.Limit, d.Window, d.Remaining, d.ResetAfter, d.RetryAfter = l.Name, l.Limit, l.Window, l.Remaining, l.ResetAfter, l.RetryAfter
	return d
}

// TestGateMultiLimitKeysAndHeaders: the gate takes each limit's key from
// its source, lists every limit in RateLimit-Policy and reports the
// binding one in RateLimit, Retry-After and the JSON.
func TestGateMultiLimitKeysAndHeaders(t *testing.T) {
	var got ratelimit.Request
	fake := decisionFake(multiPolicy, multiDecision(true, 1))
	fake.CheckFn = func(_ context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
		got = req
		return multiDecision(req.Keys[3] != "deny", 3), nil
	}
	h := newTestRouter(t, fake, handlers.Config{})
	req := newRequest("GET", "/v1/ratelimit/gate/api/orders/42", "")
	req.RemoteAddr = "192.0.2.7:4000"
	req.Header.Set("X-Api-Key", "k-1")
	rec := serve(t, h, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d, body %s", rec.Code, rec.Body)
	}
	if want := []string{"192.0.2.7", "k-1", "const", "orders/42"}; !reflect.DeepEqual(got.Keys, want) || !reflect.DeepEqual(got.Using, multiPolicy) {
		t.Fatalf("keys %q under %+v, want %q under the looked-up policy", got.Keys, got.Using, want)
	}
	wantPolicy := `"per-ip";q=10;w=1, "per-key";q=1000;w=60, "global";q=50000;w=60, "per-path";q=5;w=90`
	if g := rec.Header().Get("RateLimit-Policy"); g != wantPolicy {
		t.Errorf("RateLimit-Policy = %q, want %q", g, wantPolicy)
	}
	if g := rec.Header().Get("RateLimit"); g != `"per-path";r=3;t=80` {
		t.Errorf("RateLimit = %q, want the binding limit per-path", g)
	}

	req = newRequest("GET", "/v1/ratelimit/gate/api/deny", "")
	req.Header.Set("X-Api-Key", "k-1")
	req.Header.Set("Accept", "application/json")
	rec = serve(t, h, req)
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "42" || rec.Header().Get("RateLimit") != `"per-path";r=0;t=80` {
		t.Fatalf("denied: status %d, headers %v", rec.Code, rec.Header())
	}
	if body := rec.Body.String(); !strings.Contains(body, `"limit":5,"remaining":0,`) || !strings.Contains(body, `"binding":"per-path"`) {
		t.Errorf("denied JSON %s, want the binding limit's fields and its name", body)
	}
	req = newRequest("GET", "/v1/ratelimit/gate/api/deny", "")
	req.Header.Set("X-Api-Key", "k-1")
	rec = serve(t, h, req)
	if rec.Code != 429 || !strings.Contains(rec.Body.String(), `rate limit \"api\" (limit \"per-path\") of 5 per 90s reached; retry after 42s`) {
		t.Errorf("denied problem: %d %s", rec.Code, rec.Body)
	}
}

// TestGateMultiLimitMissingKeys: a missing header or path key is a 400
// naming the limit.
func TestGateMultiLimitMissingKeys(t *testing.T) {
	fake := decisionFake(multiPolicy, multiDecision(true, 0))
	h := newTestRouter(t, fake, handlers.Config{})
	rec := serve(t, h, newRequest("GET", "/v1/ratelimit/gate/api/x", ""))
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "limit per-key of policy api takes its key from the X-Api-Key header, which is missing") {
		t.Errorf("no header: %d %s", rec.Code, rec.Body)
	}
	req := newRequest("GET", "/v1/ratelimit/gate/api", "")
	req.Header.Set("X-Api-Key", "k")
	rec = serve(t, h, req)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "limit per-path of policy api takes its key from the path after /v1/ratelimit/gate/api/, which is missing") {
		t.Errorf("no path: %d %s", rec.Code, rec.Body)
	}
	req = newRequest("GET", "/v1/ratelimit/gate/api/a%7Bb", "")
	req.Header.Set("X-Api-Key", "k")
	if rec = serve(t, h, req); rec.Code != 400 || !strings.Contains(rec.Body.String(), "path must be 1-256 printable ASCII") {
		t.Errorf("path with a brace: %d %s", rec.Code, rec.Body)
	}
	// The check route has no gate path: the body gives the key.
	req = newRequest("POST", "/v1/ratelimit/check", `{"policy":"api"}`)
	req.Header.Set("X-Api-Key", "k")
	rec = serve(t, h, req)
	if rec.Code != 400 || !strings.Contains(rec.Body.String(), "give key in the body") {
		t.Errorf("check without key: %d %s", rec.Code, rec.Body)
	}
	for _, c := range fake.Calls() {
		if c == "Check" {
			t.Errorf("calls %q: a bad request reached Check", fake.Calls())
		}
	}
}

// TestSingleLimitHeadersUnchanged: a single-limit decision's headers and
// JSON are today's, byte for byte.
func TestSingleLimitHeadersUnchanged(t *testing.T) {
	d := ratelimit.Decision{Allowed: true, Policy: "per-ip", Limit: 3, Window: 10 * time.Second, Remaining: 2, ResetAfter: 9 * time.Second}
	h := newTestRouter(t, decisionFake(perIP(429), d), handlers.Config{})
	req := newRequest("GET", "/v1/ratelimit/gate/per-ip", "")
	req.Header.Set("Accept", "application/json")
	rec := serve(t, h, req)
	if g := rec.Header().Get("RateLimit-Policy") + " | " + rec.Header().Get("RateLimit"); g != `"per-ip";q=3;w=10 | "per-ip";r=2;t=9` {
		t.Errorf("headers %q", g)
	}
	if g, want := rec.Body.String(), `{"allowed":true,"limit":3,"remaining":2,"reset_ms":9000,"retry_after_ms":0,"policy":"per-ip","key":"192.0.2.1"}`+"\n"; g != want {
		t.Errorf("body %q, want %q", g, want)
	}
}

// TestGatePathKeyOnEveryMethod: the gate path's remainder is a path key
// whatever the method, routed or not (PROPFIND and TRACE reach the gate
// through the method-not-allowed handler), and never on the check route.
func TestGatePathKeyOnEveryMethod(t *testing.T) {
	for _, method := range []string{"GET", "DELETE", "PROPFIND", "TRACE"} {
		var got []string
		fake := decisionFake(multiPolicy, multiDecision(true, 0))
		fake.CheckFn = func(_ context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
			got = req.Keys
			return multiDecision(true, 0), nil
		}
		req := newRequest(method, "/v1/ratelimit/gate/api/orders/42/items", "")
		req.Header.Set("X-Api-Key", "k-1")
		if rec := serve(t, newTestRouter(t, fake, handlers.Config{}), req); rec.Code != http.StatusOK || len(got) != 4 || got[3] != "orders/42/items" {
			t.Errorf("%s: status %d, keys %q; want 200 with the path key orders/42/items", method, rec.Code, got)
		}
	}
}
