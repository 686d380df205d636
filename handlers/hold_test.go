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

// TestAcquirePassesWaitAndFair: wait and fair reach the service as they
// were asked for; a fair/plain mix is a 409 lock-mode-mismatch that says
// which mode the lock is in.
func TestAcquirePassesWaitAndFair(t *testing.T) {
	var got locks.AcquireRequest
	fake := grantingService()
	acquire := fake.AcquireFn
	fake.AcquireFn = func(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
		got = req
		return acquire(ctx, name, req)
	}
	rec := serve(t, newTestRouter(t, fake, handlers.Config{}), newRequest(http.MethodPost, "/v1/locks/orders", `{"wait":"1500ms","fair":true}`))
	if rec.Code != http.StatusCreated {
		t.Fatalf("status = %d, want 201 (body %s)", rec.Code, rec.Body)
	}
	if diff := cmp.Diff(locks.AcquireRequest{Wait: 1500 * time.Millisecond, Fair: true}, got); diff != "" {
		t.Errorf("request reaching the service (-want +got):\n%s", diff)
	}

	for _, fair := range []bool{true, false} {
		fake := &fakeService{AcquireFn: func(context.Context, string, locks.AcquireRequest) (locks.Lease, error) {
			return locks.Lease{}, &locks.ModeError{Name: "orders", Fair: fair}
		}}
		req := newRequest(http.MethodPost, "/v1/locks/orders", `{"wait":"1s"}`)
		p := wantProblem(t, serve(t, newTestRouter(t, fake, handlers.Config{}), req), req, http.StatusConflict, "lock-mode-mismatch")
		want := "is not fair"
		if fair {
			want = "is fair"
		}
		if !strings.Contains(p.Detail, want) {
			t.Errorf("lock fair=%v: detail %q, want it to say the lock %s", fair, p.Detail, want)
		}
	}
}

// TestHoldBeforeTheStream: what goes wrong before a hold's stream starts is
// an ordinary problem answer. A bad body never reaches the service; a bad
// name or token does, as the client sent it, and the service's refusal is
// the answer: the handler has written nothing before Hold returns.
func TestHoldBeforeTheStream(t *testing.T) {
	tests := []struct {
		desc   string
		req    *http.Request
		err    error // what the service answers
		status int
		typ    string
		calls  []string
	}{
		{"bad name", newRequest(http.MethodPost, "/v1/locks/%7Bx%7D/hold", ""), nil, 400, "invalid-request", []string{"Hold"}},
		{"bad token", newRequest(http.MethodPost, "/v1/locks/orders/hold", "", "Lock-Token", "short"), nil, 400, "invalid-request", []string{"Hold"}},
		{"unknown field", newRequest(http.MethodPost, "/v1/locks/orders/hold", `{"keepalive":true}`), nil, 400, "invalid-request", nil},
		{"bad wait", newRequest(http.MethodPost, "/v1/locks/orders/hold", `{"wait":"later"}`), nil, 400, "invalid-request", nil},
		{"held past the wait", newRequest(http.MethodPost, "/v1/locks/orders/hold", `{"wait":"1s"}`),
			&locks.HeldError{Name: "orders", RetryAfter: 3 * time.Second}, 409, "lock-held", []string{"Hold"}},
		{"store down", newRequest(http.MethodPost, "/v1/locks/orders/hold", ""),
			store.ErrUnavailable, 503, "store-unavailable", []string{"Hold"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			fake := &fakeService{HoldFn: func(context.Context, string, locks.AcquireRequest) (*locks.Hold, error) {
				return nil, tt.err
			}}
			rec := serve(t, newTestRouter(t, fake, handlers.Config{}), tt.req)
			wantProblem(t, rec, tt.req, tt.status, tt.typ)
			if diff := cmp.Diff(tt.calls, fake.Calls()); diff != "" {
				t.Errorf("service calls (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInterruptedWait: a wait cut short by the server's shutdown is a 503,
// never an empty answer that could pass for a grant.
func TestInterruptedWait(t *testing.T) {
	stopping := make(chan struct{})
	close(stopping)
	untilDone := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	fake := &fakeService{
		AcquireFn: func(ctx context.Context, _ string, _ locks.AcquireRequest) (locks.Lease, error) {
			return locks.Lease{}, untilDone(ctx)
		},
		HoldFn: func(ctx context.Context, _ string, _ locks.AcquireRequest) (*locks.Hold, error) {
			return nil, untilDone(ctx)
		},
	}
	for _, path := range []string{"/v1/locks/orders", "/v1/locks/orders/hold"} {
		req := newRequest(http.MethodPost, path, `{"wait":"10s"}`)
		rec := serve(t, newTestRouter(t, fake, handlers.Config{Stopping: stopping}), req)
		p := wantProblem(t, rec, req, http.StatusServiceUnavailable, "store-unavailable")
		if rec.Header().Get("Retry-After") != "1" || !strings.Contains(p.Detail, "shutting down") {
			t.Errorf("%s: Retry-After %q, detail %q; want 1 and a word on the shutdown", path, rec.Header().Get("Retry-After"), p.Detail)
		}
	}
}
