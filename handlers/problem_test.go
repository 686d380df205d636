package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// TestErrorTable drives each service error through an acquire and checks
// the status, problem type and headers the one mapping gives it.
func TestErrorTable(t *testing.T) {
	tests := []struct {
		desc           string
		err            error
		status         int
		typ            string
		wantRetryAfter string // "" means no Retry-After header
		field          string // "" means no errors[] entry is required
	}{
		{"held, 1001ms rounds up", &locks.HeldError{Name: "orders", RetryAfter: 1001 * time.Millisecond}, http.StatusConflict, "lock-held", "2", ""},
		{"held, exactly 1s", &locks.HeldError{Name: "orders", RetryAfter: time.Second}, http.StatusConflict, "lock-held", "1", ""},
		{"held, 1ms left", &locks.HeldError{Name: "orders", RetryAfter: time.Millisecond}, http.StatusConflict, "lock-held", "1", ""},
		{"held, no ttl", &locks.HeldError{Name: "orders"}, http.StatusConflict, "lock-held", "1", ""},
		{"held, 29.5s", &locks.HeldError{Name: "orders", RetryAfter: 29500 * time.Millisecond}, http.StatusConflict, "lock-held", "30", ""},
		{"not owner", locks.ErrNotOwner, http.StatusConflict, "not-owner", "", ""},
		{"not owner, wrapped", fmt.Errorf("acquire: %w", locks.ErrNotOwner), http.StatusConflict, "not-owner", "", ""},
		{"other conflict", store.ErrConflict, http.StatusConflict, "conflict", "", ""},
		{"not found", store.ErrNotFound, http.StatusNotFound, "lease-not-found", "", ""},
		{"validation", &store.ValidationError{Field: "ttl", Rule: "max", Detail: "ttl must be at most 1h0m0s"}, http.StatusBadRequest, "invalid-request", "", "ttl"},
		{"unavailable", fmt.Errorf("acquire: %w: %w", store.ErrUnavailable, io.EOF), http.StatusServiceUnavailable, "store-unavailable", "1", ""},
		{"deadline", fmt.Errorf("acquire: %w", context.DeadlineExceeded), http.StatusServiceUnavailable, "store-unavailable", "1", ""},
		{"unknown", errors.New("ERR user_script:7: secret internals at 10.1.2.3"), http.StatusInternalServerError, "internal", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			fake := &fakeService{AcquireFn: func(context.Context, string, locks.AcquireRequest) (locks.Lease, error) {
				return locks.Lease{}, tt.err
			}}
			req := newRequest(http.MethodPost, "/v1/locks/orders", "")
			// Unchecked against the spec: acquire never really gets some of
			// these errors (ErrNotFound), and 500 is documented nowhere.
			rec := serveUnchecked(newTestRouter(t, fake, handlers.Config{}), req)
			p := wantProblem(t, rec, req, tt.status, tt.typ)
			if got := rec.Header().Get("Retry-After"); got != tt.wantRetryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetryAfter)
			}
			if tt.field != "" {
				wantField(t, p, tt.field)
			}
			if tt.status >= 500 {
				for _, leak := range []string{"secret", "10.1.2.3", "EOF", "user_script"} {
					if strings.Contains(rec.Body.String(), leak) {
						t.Errorf("5xx body leaks %q: %s", leak, rec.Body)
					}
				}
			}
			if tt.typ == "internal" && p.Detail != "internal error" {
				t.Errorf("detail = %q, want %q", p.Detail, "internal error")
			}
		})
	}
}

// A 503 says what the store did: a slot moved (MOVED, answered at once) is
// not a store that did not answer in time.
func TestUnavailableDetailSaysWhatTheStoreDid(t *testing.T) {
	tests := []struct {
		desc, want string
		err        error
	}{
		{"moved", "the store moved the name to another node (a failover or a slot move); try again",
			fmt.Errorf("acquire: %w: %w", store.ErrSlotMoved, errors.New("MOVED 3999 127.0.0.1:7001"))},
		{"hold lapsed", "the lease ran out before the hold could report it (the store answered slowly); try again", locks.ErrHoldLapsed},
		{"timeout", "the store did not answer in time; try again",
			fmt.Errorf("acquire: %w: %w", store.ErrUnavailable, context.DeadlineExceeded)},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			fake := &fakeService{AcquireFn: func(context.Context, string, locks.AcquireRequest) (locks.Lease, error) {
				return locks.Lease{}, tt.err
			}}
			req := newRequest(http.MethodPost, "/v1/locks/orders", "")
			rec := serve(t, newTestRouter(t, fake, handlers.Config{}), req)
			if p := wantProblem(t, rec, req, http.StatusServiceUnavailable, "store-unavailable"); p.Detail != tt.want {
				t.Errorf("detail = %q, want %q", p.Detail, tt.want)
			}
		})
	}
}

// TestErrorTableOnEveryRoute checks that each lock route maps service
// errors through the same table.
func TestErrorTableOnEveryRoute(t *testing.T) {
	notOwner := locks.ErrNotOwner
	fake := &fakeService{
		RenewFn: func(context.Context, string, string, time.Duration) (locks.Lease, error) {
			return locks.Lease{}, notOwner
		},
		ReleaseFn: func(context.Context, string, string) (locks.Released, error) {
			return locks.Released{}, store.ErrNotFound
		},
		InspectFn: func(context.Context, string, string) (locks.LockState, error) {
			return locks.LockState{}, store.ErrUnavailable
		},
		ForceReleaseFn: func(context.Context, string) (bool, error) { return false, context.DeadlineExceeded },
	}
	h := newTestRouter(t, fake, handlers.Config{AdminKey: adminKey})
	tests := []struct {
		req    *http.Request
		status int
		typ    string
	}{
		{newRequest(http.MethodPost, "/v1/locks/orders/renew", "", "Lock-Token", tokenA), http.StatusConflict, "not-owner"},
		{newRequest(http.MethodDelete, "/v1/locks/orders", "", "Lock-Token", tokenA), http.StatusNotFound, "lease-not-found"},
		{newRequest(http.MethodGet, "/v1/locks/orders", ""), http.StatusServiceUnavailable, "store-unavailable"},
		{newRequest(http.MethodDelete, "/v1/locks/orders?force=true", "", "Authorization", "Bearer "+adminKey), http.StatusServiceUnavailable, "store-unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.req.Method+" "+tt.req.URL.String(), func(t *testing.T) {
			wantProblem(t, serve(t, h, tt.req), tt.req, tt.status, tt.typ)
		})
	}
}

func TestCancelledRequestGetsNothing(t *testing.T) {
	fake := &fakeService{AcquireFn: func(ctx context.Context, _ string, _ locks.AcquireRequest) (locks.Lease, error) {
		<-ctx.Done()
		return locks.Lease{}, ctx.Err()
	}}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := newRequest(http.MethodPost, "/v1/locks/orders", "").WithContext(ctx)
	rec := serveUnchecked(newTestRouter(t, fake, handlers.Config{}), req) // nobody reads this answer
	if rec.Body.Len() != 0 || rec.Header().Get("Content-Type") != "" {
		t.Errorf("response to a client that went away = %d %q %s, want nothing written",
			rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
}

// TestCanceledErrorOfALiveRequestIsNotSilent: a context.Canceled that does
// not come from the request's own context is a server fault, not a client
// that went away.
func TestCanceledErrorOfALiveRequestIsNotSilent(t *testing.T) {
	fake := &fakeService{AcquireFn: func(context.Context, string, locks.AcquireRequest) (locks.Lease, error) {
		return locks.Lease{}, context.Canceled
	}}
	req := newRequest(http.MethodPost, "/v1/locks/orders", "")
	rec := serveUnchecked(newTestRouter(t, fake, handlers.Config{}), req) // 500 is not in the spec
	wantProblem(t, rec, req, http.StatusInternalServerError, "internal")
}

// TestProblemTypesAreDocumented: the problem table has one row per problem
// type api/openapi.yaml lists, each with a title and an error status, and
// no row for a type the spec does not list. Handlers raise problems by row,
// so they cannot answer a type outside the table.
func TestProblemTypesAreDocumented(t *testing.T) {
	spec := specProblemTypes(t)
	rows := handlers.ProblemRows()
	seen := map[string]bool{}
	for _, row := range rows {
		if !spec[row.Type] {
			t.Errorf("problem type %q has a row but is not in the Problem.type enum of api/openapi.yaml", row.Type)
		}
		if seen[row.Type] {
			t.Errorf("problem type %q has two rows", row.Type)
		}
		seen[row.Type] = true
		if row.Title == "" {
			t.Errorf("problem type %q has no title", row.Type)
		}
		if row.Status < 400 || row.Status > 599 {
			t.Errorf("problem type %q has status %d, want an error status", row.Type, row.Status)
		}
	}
	for typ := range spec {
		if !seen[typ] {
			t.Errorf("problem type %q of api/openapi.yaml has no row in the problem table", typ)
		}
	}
}
