package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// semaphoreService answers every semaphore call with success and records
// the requests it was given.
func semaphoreService(got *[]locks.SemaphoreRequest) *fakeService {
	lease := func(name, token string) locks.SemaphoreLease {
		return locks.SemaphoreLease{Name: name, Token: token, Count: 2, Permits: 8, Available: 6, Fence: 9,
			TTL: 30 * time.Second, ExpiresAt: expires}
	}
	state := locks.SemaphoreState{Permits: 8, InUse: 2, Holders: 1, Waiters: 3, Fair: true, Fence: 9}
	return &fakeService{fakeSemaphores: fakeSemaphores{
		AcquireSemaphoreFn: func(_ context.Context, name string, req locks.SemaphoreRequest) (locks.SemaphoreLease, error) {
			if got != nil {
				*got = append(*got, req)
			}
			tok := req.Token
			if tok == "" {
				tok = "server-token-0123456789"
			}
			return lease(name, tok), nil
		},
		RenewSemaphoreFn: func(_ context.Context, name, token string, _ time.Duration) (locks.SemaphoreLease, error) {
			return lease(name, token), nil
		},
		ReleaseSemaphoreFn:      func(context.Context, string, string) (int64, error) { return 2, nil },
		ForceReleaseSemaphoreFn: func(context.Context, string) (int64, error) { return 1, nil },
		SetSemaphorePermitsFn: func(_ context.Context, name string, permits int64) (locks.SemaphoreState, error) {
			st := state
			st.Name, st.Permits = name, permits
			return st, nil
		},
		InspectSemaphoreFn: func(_ context.Context, name, token string) (locks.SemaphoreState, error) {
			st := state
			st.Name = name
			if token != "" {
				st.Owned = true
				l := lease(name, "")
				st.Lease = &l
			}
			return st, nil
		},
	}}
}

func TestAcquireSemaphore(t *testing.T) {
	var got []locks.SemaphoreRequest
	h := newTestRouter(t, semaphoreService(&got), handlers.Config{})
	req := newRequest(http.MethodPost, "/v1/semaphores/pool",
		`{"permits": 8, "count": 2, "ttl": "10s", "wait": "2s", "fair": true, "keepalive": true, "max_hold": "1m", "heartbeat": "20s", "owner": "w-1"}`,
		"Lock-Token", tokenA)
	rec := serve(t, h, req)
	if rec.Code != http.StatusCreated || rec.Header().Get("Lock-Token") != tokenA || rec.Header().Get("Location") != "/v1/semaphores/pool" {
		t.Fatalf("acquire = %d, Lock-Token %q, Location %q; want 201, %q, /v1/semaphores/pool (body %s)",
			rec.Code, rec.Header().Get("Lock-Token"), rec.Header().Get("Location"), tokenA, rec.Body)
	}
	want := locks.SemaphoreRequest{Permits: 8, Count: 2, AcquireRequest: locks.AcquireRequest{Token: tokenA,
		TTL: 10 * time.Second, Wait: 2 * time.Second, Fair: true, Keepalive: true, MaxHold: time.Minute,
		Heartbeat: 20 * time.Second, Owner: "w-1"}}
	if diff := cmp.Diff([]locks.SemaphoreRequest{want}, got); diff != "" {
		t.Errorf("service request (-want +got):\n%s", diff)
	}
	body := decodeBody(t, rec)
	for k, v := range map[string]any{"token": tokenA, "count": 2.0, "permits": 8.0, "available": 6.0, "fence": 9.0, "ttl_ms": 30000.0} {
		if body[k] != v {
			t.Errorf("body[%q] = %v, want %v (%s)", k, body[k], v, rec.Body)
		}
	}
}

func TestSemaphoreRoutes(t *testing.T) {
	auth := "Bearer " + adminKey
	tests := []struct {
		desc   string
		req    *http.Request
		status int
		typ    string // problem type; "" for a success
		field  string
		want   string // a fragment of the body
	}{
		{"no permits", newRequest(http.MethodPost, "/v1/semaphores/pool", `{"count": 1}`), 400, "invalid-request", "permits", ""},
		{"no body", newRequest(http.MethodPost, "/v1/semaphores/pool", ""), 400, "invalid-request", "permits", ""},
		{"zero count", newRequest(http.MethodPost, "/v1/semaphores/pool", `{"permits": 2, "count": 0}`), 400, "invalid-request", "count", ""},
		{"negative count", newRequest(http.MethodPost, "/v1/semaphores/pool", `{"permits": 2, "count": -1}`), 400, "invalid-request", "count", ""},
		{"permits too many", newRequest(http.MethodPost, "/v1/semaphores/pool", `{"permits": 1000001}`), 400, "invalid-request", "permits", ""},
		{"permits a string", newRequest(http.MethodPost, "/v1/semaphores/pool", `{"permits": "8"}`), 400, "invalid-request", "permits", ""},
		{"unknown field", newRequest(http.MethodPost, "/v1/semaphores/pool", `{"permits": 8, "mode": "read"}`), 400, "invalid-request", "mode", ""},
		{"bad ttl", newRequest(http.MethodPost, "/v1/semaphores/pool", `{"permits": 8, "ttl": "soon"}`), 400, "invalid-request", "ttl", ""},
		{"bad name", newRequest(http.MethodPost, "/v1/semaphores/a%7Bb%7D", `{"permits": 8}`), 400, "invalid-request", "name", ""},
		{"get", newRequest(http.MethodGet, "/v1/semaphores/pool", ""), 200, "", "", `"available":6`},
		{"get with token", newRequest(http.MethodGet, "/v1/semaphores/pool", "", "Lock-Token", tokenA), 200, "", "", `"owned":true,"lease":{"count":2`},
		{"renew", newRequest(http.MethodPost, "/v1/semaphores/pool/renew", `{"ttl": "5s"}`, "Lock-Token", tokenA), 200, "", "", `"count":2`},
		{"renew without token", newRequest(http.MethodPost, "/v1/semaphores/pool/renew", ""), 400, "invalid-request", "Lock-Token", ""},
		{"release", newRequest(http.MethodDelete, "/v1/semaphores/pool", "", "Lock-Token", tokenA), 200, "", "", `{"released":true,"count":2}`},
		{"release without token", newRequest(http.MethodDelete, "/v1/semaphores/pool", ""), 400, "invalid-request", "Lock-Token", ""},
		{"force without credential", newRequest(http.MethodDelete, "/v1/semaphores/a%7B?force=true", ""), 403, "forbidden", "", ""},
		{"force", newRequest(http.MethodDelete, "/v1/semaphores/pool?force=true", "", "Authorization", auth), 204, "", "", ""},
		{"put", newRequest(http.MethodPut, "/v1/semaphores/pool", `{"permits": 12}`, "Authorization", auth), 200, "", "", `"permits":12`},
		{"put without credential", newRequest(http.MethodPut, "/v1/semaphores/pool", `{"permits": 12}`), 403, "forbidden", "", ""},
		{"put without permits", newRequest(http.MethodPut, "/v1/semaphores/pool", `{}`, "Authorization", auth), 400, "invalid-request", "permits", ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			h := newTestRouter(t, semaphoreService(nil), handlers.Config{AdminKey: adminKey})
			rec := serve(t, h, tt.req)
			if tt.typ != "" {
				p := wantProblem(t, rec, tt.req, tt.status, tt.typ)
				if tt.field != "" {
					wantField(t, p, tt.field)
				}
				return
			}
			if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.want) {
				t.Errorf("status %d, body %s; want %d with %s", rec.Code, rec.Body, tt.status, tt.want)
			}
		})
	}
}

func TestSemaphoreErrors(t *testing.T) {
	tests := []struct {
		err        error
		status     int
		typ        string
		retryAfter string
		inDetail   string
	}{
		{&locks.PermitsMismatchError{Name: "pool", Permits: 5}, 409, "permits-mismatch", "", `"permits": 5`},
		{&locks.PermitsUnavailableError{Name: "pool", Available: 1, RetryAfter: 2500 * time.Millisecond}, 409, "permits-unavailable", "3", "1 free"},
		{locks.ErrTokenInUse, 409, "token-in-use", "", "another token"},
		{&locks.ModeError{Name: "pool", Fair: true}, 409, "lock-mode-mismatch", "", "fair"},
		{store.ErrUnavailable, 503, "store-unavailable", "1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			fake := &fakeService{fakeSemaphores: fakeSemaphores{
				AcquireSemaphoreFn: func(context.Context, string, locks.SemaphoreRequest) (locks.SemaphoreLease, error) {
					return locks.SemaphoreLease{}, tt.err
				},
			}}
			req := newRequest(http.MethodPost, "/v1/semaphores/pool", `{"permits": 8}`)
			rec := serve(t, newTestRouter(t, fake, handlers.Config{}), req)
			p := wantProblem(t, rec, req, tt.status, tt.typ)
			if got := rec.Header().Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.retryAfter)
			}
			if !strings.Contains(p.Detail, tt.inDetail) {
				t.Errorf("detail = %q, want it to mention %q", p.Detail, tt.inDetail)
			}
		})
	}
	fake := &fakeService{fakeSemaphores: fakeSemaphores{
		ReleaseSemaphoreFn: func(context.Context, string, string) (int64, error) { return 0, store.ErrNotFound },
	}}
	req := newRequest(http.MethodDelete, "/v1/semaphores/pool", "", "Lock-Token", tokenA)
	wantProblem(t, serve(t, newTestRouter(t, fake, handlers.Config{}), req), req, 404, "lease-not-found")
}

// TestSemaphoreInputTheServiceRefuses runs requests the handlers pass on
// through the real service, which refuses them before calling Redis.
func TestSemaphoreInputTheServiceRefuses(t *testing.T) {
	h := handlers.NewRouter(offlineLocks(t), &fakeService{}, handlers.Config{})
	for _, tt := range []struct{ body, field string }{
		{`{"permits": 2, "count": 3}`, "count"},
		{`{"permits": 2, "max_hold": "1h"}`, "max_hold"},
		{`{"permits": 2, "owner": "a\u0007b"}`, "owner"},
	} {
		req := newRequest(http.MethodPost, "/v1/semaphores/pool", tt.body)
		wantField(t, wantProblem(t, serve(t, h, req), req, 400, "invalid-request"), tt.field)
	}
}

// TestHoldSemaphoreRequest: a hold's body reaches the service as a
// semaphore request; bad input and a refusal are problem answers before the
// stream starts.
func TestHoldSemaphoreRequest(t *testing.T) {
	var got locks.SemaphoreRequest
	fake := &fakeService{fakeSemaphores: fakeSemaphores{
		HoldSemaphoreFn: func(_ context.Context, _ string, req locks.SemaphoreRequest) (*locks.Hold, error) {
			got = req
			return nil, &locks.PermitsUnavailableError{Name: "pool", RetryAfter: time.Second}
		},
	}}
	h := newTestRouter(t, fake, handlers.Config{})
	req := newRequest(http.MethodPost, "/v1/semaphores/pool/hold", `{"permits": 8, "count": 2, "ttl": "9s", "wait": "1s", "fair": true, "owner": "w"}`)
	wantProblem(t, serve(t, h, req), req, 409, "permits-unavailable")
	want := locks.SemaphoreRequest{Permits: 8, Count: 2, AcquireRequest: locks.AcquireRequest{TTL: 9 * time.Second,
		Wait: time.Second, Fair: true, Owner: "w"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hold request (-want +got):\n%s", diff)
	}
	for _, tt := range []struct{ body, field string }{
		{`{}`, "permits"},
		{`{"permits": 8, "keepalive": true}`, "keepalive"},
		{`{"permits": 8, "count": 0}`, "count"},
	} {
		req := newRequest(http.MethodPost, "/v1/semaphores/pool/hold", tt.body)
		wantField(t, wantProblem(t, serve(t, h, req), req, 400, "invalid-request"), tt.field)
	}
}
