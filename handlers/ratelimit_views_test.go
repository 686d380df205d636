package handlers_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
)

// The top route reads ?limit= once, strictly (default 10), hands it and
// the policy to the service, and answers the service's keys as the spec
// says; a limit that is no whole number is a 400 naming it that never
// reaches the service, and the service's errors are answered as problems.
func TestListTopDeniedKeys(t *testing.T) {
	tests := []struct {
		name, target string
		wantN        int // 0: the service is not called
		status       int
		typ          string
	}{
		{"default limit", "/v1/ratelimit/policies/per-ip/top", 10, 200, ""},
		{"limit", "/v1/ratelimit/policies/per-ip/top?limit=2", 2, 200, ""},
		{"limit above the bound", "/v1/ratelimit/policies/per-ip/top?limit=101", 101, 400, "invalid-request"},
		{"unknown policy", "/v1/ratelimit/policies/other/top", 10, 404, "policy-not-found"},
		{"limit not a number", "/v1/ratelimit/policies/per-ip/top?limit=ten", 0, 400, "invalid-request"},
		{"limit empty", "/v1/ratelimit/policies/per-ip/top?limit=", 0, 400, "invalid-request"},
		{"limit a fraction", "/v1/ratelimit/policies/per-ip/top?limit=1.5", 0, 400, "invalid-request"},
		{"limit twice", "/v1/ratelimit/policies/per-ip/top?limit=1&limit=2", 0, 400, "invalid-request"},
		{"limit's case", "/v1/ratelimit/policies/per-ip/top?Limit=2", 0, 400, "invalid-request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeService{}
			var gotN int
			fake.TopDeniedFn = func(ctx context.Context, policy string, n int) (ratelimit.TopKeys, error) {
				gotN = n
				if policy != "per-ip" {
					return ratelimit.TopKeys{}, &ratelimit.PolicyNotFoundError{Name: policy}
				}
				if n > ratelimit.MaxTopKeys {
					return ratelimit.TopKeys{}, store.Invalid("limit", "max", "limit must be at most %d, got %d", ratelimit.MaxTopKeys, n)
				}
				items := []ratelimit.KeyCount{{Key: "203.0.113.7", Denied: 9}, {Key: "203.0.113.8", Denied: 3}}
				return ratelimit.TopKeys{Policy: policy, Window: 5 * time.Minute, Items: items[:min(n, 2)]}, nil
			}
			h := newTestRouter(t, fake, handlers.Config{})
			req := newRequest("GET", tt.target, "")
			rec := serve(t, h, req)
			if gotN != tt.wantN {
				t.Errorf("service asked for %d keys, want %d", gotN, tt.wantN)
			}
			if tt.typ != "" {
				p := wantProblem(t, rec, req, tt.status, tt.typ)
				if tt.status == 400 {
					wantField(t, p, map[bool]string{true: "Limit", false: "limit"}[tt.name == "limit's case"])
				}
				return
			}
			var body struct {
				Policy        string `json:"policy"`
				WindowSeconds int    `json:"window_seconds"`
				Approximate   bool   `json:"approximate"`
				Items         []struct {
					Key    string `json:"key"`
					Denied int64  `json:"denied"`
				} `json:"items"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 200 {
				t.Fatalf("status %d, body %s: %v", rec.Code, rec.Body, err)
			}
			if body.Policy != "per-ip" || body.WindowSeconds != 300 || !body.Approximate || len(body.Items) != min(tt.wantN, 2) ||
				body.Items[0].Key != "203.0.113.7" || body.Items[0].Denied != 9 {
				t.Errorf("body %s", rec.Body)
			}
		})
	}
}
