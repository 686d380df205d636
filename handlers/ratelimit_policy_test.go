package handlers_test

import (
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// A shadow would-deny is answered as allowed and marked, on the gate and on
// check; a plain allow is not marked.
func TestShadowWouldDenyIsMarked(t *testing.T) {
	would := ratelimit.Decision{Allowed: true, WouldDeny: true, Policy: "per-ip", Limit: 3, Window: 10 * time.Second}
	for _, tt := range []struct {
		d    ratelimit.Decision
		want string
	}{{would, "would-deny"}, {ratelimit.Decision{Allowed: true, Policy: "per-ip", Limit: 3, Window: 10 * time.Second}, ""}} {
		h := newTestRouter(t, decisionFake(perIP(403), tt.d), handlers.Config{})
		for _, req := range []*http.Request{newRequest("GET", "/v1/ratelimit/gate/per-ip", ""),
			newRequest("POST", "/v1/ratelimit/check", `{"policy":"per-ip","key":"k"}`)} {
			rec := serve(t, h, req)
			if rec.Code != http.StatusOK || rec.Header().Get("Latchkey-Ratelimit-Shadow") != tt.want || rec.Header().Get("Retry-After") != "" {
				t.Errorf("%s %s: %d shadow %q, want 200 and %q", req.Method, req.URL.Path, rec.Code,
					rec.Header().Get("Latchkey-Ratelimit-Shadow"), tt.want)
			}
		}
	}
}

// The gate hands the service the cost from the policy's header and the
// policy it looked up; a bad value is a 400 that never reaches Check.
func TestGateCostHeader(t *testing.T) {
	pol := perIP(429)
	pol.Cost = ratelimit.CostSource{Header: "X-Tokens", Max: 3, Default: 1}
	fake := decisionFake(pol, ratelimit.Decision{Allowed: true, Policy: "per-ip", Limit: 3, Window: 10 * time.Second})
	var got ratelimit.Request
	check := fake.CheckFn
	fake.CheckFn = func(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
		got = req
		return check(ctx, req)
	}
	h := newTestRouter(t, fake, handlers.Config{})
	req := newRequest("GET", "/v1/ratelimit/gate/per-ip", "")
	req.Header.Set("X-Tokens", "2")
	if rec := serve(t, h, req); rec.Code != http.StatusOK || got.Cost != 2 || !reflect.DeepEqual(got.Using, pol) {
		t.Fatalf("status %d, request %+v, want cost 2 under the looked-up policy", rec.Code, got)
	}
	req = newRequest("GET", "/v1/ratelimit/gate/per-ip", "")
	req.Header.Set("X-Tokens", "4")
	got = ratelimit.Request{}
	if rec := serve(t, h, req); rec.Code != http.StatusBadRequest || got.Key != "" {
		t.Fatalf("cost above max: status %d, Check called with %+v", rec.Code, got)
	}
}
