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
)

// TestOwnerReachesTheService: acquire and hold bodies carry owner to the
// service as sent.
func TestOwnerReachesTheService(t *testing.T) {
	const owner = `deploy "blue" <ci-17> é`
	body := `{"owner":"deploy \"blue\" <ci-17> \u00e9"}`

	fake := grantingService()
	var got locks.AcquireRequest
	acquire := fake.AcquireFn
	fake.AcquireFn = func(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
		got = req
		return acquire(ctx, name, req)
	}
	rec := serve(t, newTestRouter(t, fake, handlers.Config{}), newRequest(http.MethodPost, "/v1/locks/orders", body))
	if rec.Code != http.StatusCreated || got.Owner != owner {
		t.Errorf("acquire: %d, service got owner %q; want 201 and %q", rec.Code, got.Owner, owner)
	}
	if strings.Contains(rec.Body.String(), "owner") {
		t.Errorf("lease answer %s carries owner: GET shows it, the lease does not", rec.Body)
	}

	var held locks.AcquireRequest
	fake.HoldFn = func(_ context.Context, _ string, req locks.AcquireRequest) (*locks.Hold, error) {
		held = req
		return nil, locks.ErrNotOwner // any error: only the request matters here
	}
	serveUnchecked(newTestRouter(t, fake, handlers.Config{}), newRequest(http.MethodPost, "/v1/locks/orders/hold", body))
	if held.Owner != owner {
		t.Errorf("hold: service got owner %q, want %q", held.Owner, owner)
	}
}

// TestBadOwnerIsRefused: an owner that is too long or not printable is a
// 400 naming owner, on acquire and on hold. The handler passes the text to
// the service, whose check it is (the fake makes it as the service does);
// an owner that is not a JSON string is the handler's to refuse.
func TestBadOwnerIsRefused(t *testing.T) {
	bad := []struct{ desc, json, inDetail string }{
		{"129 characters", `"` + strings.Repeat("x", 129) + `"`, "at most 128 characters"},
		{"a newline", `"job\nforged"`, "U+000A"},
		{"a tab", `"job\t1"`, "U+0009"},
		{"an escape", `"\u001b[31m"`, "U+001B"},
		{"a bidi override", `"job\u202e"`, "U+202E"},
		{"a number", `42`, "string"},
	}
	var tests []requestCase
	for _, b := range bad {
		for _, r := range []struct{ path, call string }{{"/v1/locks/orders", "Acquire"}, {"/v1/locks/orders/hold", "Hold"}} {
			tc := requestCase{desc: r.path + " owner " + b.desc,
				req:    newRequest(http.MethodPost, r.path, `{"ttl":"10s","owner":`+b.json+`}`),
				status: 400, typ: "invalid-request", field: "owner", inDetail: b.inDetail}
			if b.json[0] == '"' {
				tc.calls = []string{r.call}
			}
			tests = append(tests, tc)
		}
	}
	tests = append(tests,
		requestCase{desc: "128 characters", req: newRequest(http.MethodPost, "/v1/locks/orders", `{"owner":"`+strings.Repeat("é", 128)+`"}`),
			status: 201, calls: []string{"Acquire"}},
		requestCase{desc: "empty is none", req: newRequest(http.MethodPost, "/v1/locks/orders", `{"owner":""}`),
			status: 201, calls: []string{"Acquire"}},
	)
	runRequestCases(t, tests)
}

// TestInspectShowsOwnerAndGrantedAt: GET shows the owner and the grant
// time of a held lock to anyone, with or without a token.
func TestInspectShowsOwnerAndGrantedAt(t *testing.T) {
	granted := time.Date(2026, 11, 23, 5, 0, 0, 123456000, time.UTC)
	held := locks.LockState{Name: "orders", Held: true, HoldCount: 1, TTL: 30 * time.Second,
		ExpiresAt: expires, Fence: granted.UnixMicro(), Owner: "cron@web-3 <nightly>", GrantedAt: granted}
	for _, token := range []string{"", tokenA} {
		fake := &fakeService{InspectFn: func(context.Context, string, string) (locks.LockState, error) { return held, nil }}
		rec := serve(t, newTestRouter(t, fake, handlers.Config{}), newRequest(http.MethodGet, "/v1/locks/orders", "", "Lock-Token", token))
		if rec.Code != http.StatusOK {
			t.Fatalf("status = %d, want 200", rec.Code)
		}
		body := decodeBody(t, rec)
		want := map[string]any{"owner": "cron@web-3 <nightly>", "granted_at": "2026-11-23T05:00:00.123456Z"}
		if diff := cmp.Diff(want, map[string]any{"owner": body["owner"], "granted_at": body["granted_at"]}); diff != "" {
			t.Errorf("token %q: body (-want +got):\n%s", token, diff)
		}
	}

	// A free lock has neither (a state that says so is not shown either).
	fake := &fakeService{InspectFn: func(context.Context, string, string) (locks.LockState, error) {
		return locks.LockState{Name: "orders", Fence: 41, Owner: "stale", GrantedAt: granted}, nil
	}}
	rec := serve(t, newTestRouter(t, fake, handlers.Config{}), newRequest(http.MethodGet, "/v1/locks/orders", ""))
	body := decodeBody(t, rec)
	if _, ok := body["owner"]; ok {
		t.Errorf("free lock shows owner: %s", rec.Body)
	}
	if _, ok := body["granted_at"]; ok {
		t.Errorf("free lock shows granted_at: %s", rec.Body)
	}
}
