package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
)

const (
	tokenA   = "token-a-0123456789abcdef"
	adminKey = "admin-key-0123456789"
)

var expires = time.Date(2026, 11, 23, 5, 0, 30, 0, time.UTC)

// grantingService answers every lock call with success, as a free lock would.
func grantingService() *fakeService {
	return &fakeService{
		AcquireFn: func(_ context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
			tok := req.Token
			if tok == "" {
				tok = "server-token-0123456789"
			}
			return locks.Lease{Name: name, Token: tok, Fence: 7, HoldCount: 1, TTL: 30 * time.Second, ExpiresAt: expires}, nil
		},
		RenewFn: func(_ context.Context, name, token string, ttl time.Duration) (locks.Lease, error) {
			return locks.Lease{Name: name, Token: token, Fence: 7, HoldCount: 1, TTL: 30 * time.Second, ExpiresAt: expires}, nil
		},
		ReleaseFn: func(context.Context, string, string) (locks.Released, error) {
			return locks.Released{Released: true}, nil
		},
		ForceReleaseFn: func(context.Context, string) (bool, error) { return true, nil },
		InspectFn: func(_ context.Context, name, _ string) (locks.LockState, error) {
			return locks.LockState{Name: name}, nil
		},
	}
}

// requestCase is one request through the router on grantingService, with
// what must come back.
type requestCase struct {
	desc     string
	req      *http.Request
	cfg      handlers.Config
	status   int
	typ      string   // problem type; "" for a success
	field    string   // errors[] must name it ("" for none)
	calls    []string // service calls expected
	inDetail string   // substring of the detail ("" for any)
}

func runRequestCases(t *testing.T, tests []requestCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			fake := grantingService()
			rec := serve(t, newTestRouter(t, fake, tt.cfg), tt.req)
			if tt.typ == "" {
				if rec.Code != tt.status {
					t.Errorf("status = %d, want %d (body %s)", rec.Code, tt.status, rec.Body)
				}
			} else {
				p := wantProblem(t, rec, tt.req, tt.status, tt.typ)
				if tt.field != "" {
					wantField(t, p, tt.field)
				}
				if !strings.Contains(p.Detail, tt.inDetail) {
					t.Errorf("detail = %q, want it to mention %q", p.Detail, tt.inDetail)
				}
			}
			if diff := cmp.Diff(tt.calls, fake.Calls()); diff != "" {
				t.Errorf("service calls (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLockRequestValidation: every bad request is a problem naming what is
// wrong. What is wrong with the HTTP request (its body, a missing
// Lock-Token, force, the admin credential) is refused before the service;
// the lock name and the token's format are the service's to check, so those
// requests reach it (and the fake refuses them as the service does).
func TestLockRequestValidation(t *testing.T) {
	long := strings.Repeat("a", 129)
	type tc = requestCase
	tests := []tc{
		// Durations.
		{desc: "ttl unparsable", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"soon"}`), status: 400, typ: "invalid-request", field: "ttl", inDetail: "soon"},
		{desc: "ttl zero", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"0s"}`), status: 400, typ: "invalid-request", field: "ttl"},
		{desc: "ttl negative", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"-1s"}`), status: 400, typ: "invalid-request", field: "ttl"},
		{desc: "renew ttl unparsable", req: newRequest("POST", "/v1/locks/orders/renew", `{"ttl":"1 minute"}`, "Lock-Token", tokenA), status: 400, typ: "invalid-request", field: "ttl"},
		{desc: "renew ttl zero", req: newRequest("POST", "/v1/locks/orders/renew", `{"ttl":"0s"}`, "Lock-Token", tokenA), status: 400, typ: "invalid-request", field: "ttl"},
		{desc: "renew ttl negative", req: newRequest("POST", "/v1/locks/orders/renew", `{"ttl":"-5s"}`, "Lock-Token", tokenA), status: 400, typ: "invalid-request", field: "ttl"},
		{desc: "wait unparsable", req: newRequest("POST", "/v1/locks/orders", `{"wait":"later"}`), status: 400, typ: "invalid-request", field: "wait"},

		// Acquire fields that reach the service.
		{desc: "wait", req: newRequest("POST", "/v1/locks/orders", `{"wait":"5s"}`), status: 201, calls: []string{"Acquire"}},
		{desc: "fair", req: newRequest("POST", "/v1/locks/orders", `{"fair":true,"wait":"1s"}`), status: 201, calls: []string{"Acquire"}},
		// Keep-alive: the handler checks the durations; the service checks the bounds.
		{desc: "keepalive", req: newRequest("POST", "/v1/locks/orders", `{"keepalive":true,"max_hold":"1m","heartbeat":"10s"}`), status: 201, calls: []string{"Acquire"}},
		{desc: "keepalive not a boolean", req: newRequest("POST", "/v1/locks/orders", `{"keepalive":"yes"}`), status: 400, typ: "invalid-request", field: "keepalive"},
		{desc: "max_hold unparsable", req: newRequest("POST", "/v1/locks/orders", `{"keepalive":true,"max_hold":"forever"}`), status: 400, typ: "invalid-request", field: "max_hold"},
		{desc: "heartbeat zero", req: newRequest("POST", "/v1/locks/orders", `{"keepalive":true,"heartbeat":"0s"}`), status: 400, typ: "invalid-request", field: "heartbeat"},
		{desc: "their defaults are fine", req: newRequest("POST", "/v1/locks/orders", `{"wait":"0s","keepalive":false,"fair":false}`), status: 201, calls: []string{"Acquire"}},

		// Lock-Token.
		{desc: "acquire malformed token", req: newRequest("POST", "/v1/locks/orders", "", "Lock-Token", "short"), status: 400, typ: "invalid-request", field: "Lock-Token", calls: []string{"Acquire"}},
		{desc: "inspect malformed token", req: newRequest("GET", "/v1/locks/orders", "", "Lock-Token", "has+plus/and=pad-00000"), status: 400, typ: "invalid-request", field: "Lock-Token", calls: []string{"Inspect"}},
		{desc: "renew malformed token", req: newRequest("POST", "/v1/locks/orders/renew", "", "Lock-Token", strings.Repeat("t", 129)), status: 400, typ: "invalid-request", field: "Lock-Token", calls: []string{"Renew"}},
		{desc: "release malformed token", req: newRequest("DELETE", "/v1/locks/orders", "", "Lock-Token", "short"), status: 400, typ: "invalid-request", field: "Lock-Token", calls: []string{"Release"}},
		{desc: "renew without token", req: newRequest("POST", "/v1/locks/orders/renew", ""), status: 400, typ: "invalid-request", field: "Lock-Token", inDetail: "required"},
		{desc: "release without token", req: newRequest("DELETE", "/v1/locks/orders", ""), status: 400, typ: "invalid-request", field: "Lock-Token", inDetail: "required"},

		// Force-release.
		{desc: "force=maybe", req: newRequest("DELETE", "/v1/locks/orders?force=maybe", "", "Authorization", "Bearer "+adminKey),
			cfg: handlers.Config{AdminKey: adminKey}, status: 400, typ: "invalid-request", field: "force"},
		{desc: "force without an admin key configured", req: newRequest("DELETE", "/v1/locks/orders?force=true", "", "Authorization", "Bearer "+adminKey),
			status: 403, typ: "forbidden", inDetail: "no admin key configured"},
		{desc: "force without a credential", req: newRequest("DELETE", "/v1/locks/orders?force=true", ""),
			cfg: handlers.Config{AdminKey: adminKey}, status: 403, typ: "forbidden", inDetail: "Authorization: Bearer"},
		{desc: "force with the wrong bearer", req: newRequest("DELETE", "/v1/locks/orders?force=true", "", "Authorization", "Bearer "+adminKey+"x"),
			cfg: handlers.Config{AdminKey: adminKey}, status: 403, typ: "forbidden"},
		{desc: "force with the key but not as bearer", req: newRequest("DELETE", "/v1/locks/orders?force=true", "", "Authorization", adminKey),
			cfg: handlers.Config{AdminKey: adminKey}, status: 403, typ: "forbidden"},
		{desc: "force with a lease token only", req: newRequest("DELETE", "/v1/locks/orders?force=true", "", "Lock-Token", tokenA),
			cfg: handlers.Config{AdminKey: adminKey}, status: 403, typ: "forbidden"},
		{desc: "force with the right bearer, scheme in lower case", req: newRequest("DELETE", "/v1/locks/orders?force=true", "", "Authorization", "bearer "+adminKey),
			cfg: handlers.Config{AdminKey: adminKey}, status: 204, calls: []string{"ForceRelease"}},
		{desc: "force with the right bearer", req: newRequest("DELETE", "/v1/locks/orders?force=true", "", "Authorization", "Bearer "+adminKey),
			cfg: handlers.Config{AdminKey: adminKey}, status: 204, calls: []string{"ForceRelease"}},
		{desc: "force=false is a normal release", req: newRequest("DELETE", "/v1/locks/orders?force=false", "", "Lock-Token", tokenA),
			status: 200, calls: []string{"Release"}},
		// The admin credential comes before the name: without it a force-release
		// is refused whatever the name (access before input, as Consul and etcd
		// check their ACLs first), and the service never sees the name.
		{desc: "force with a bad name and no credential", req: newRequest("DELETE", "/v1/locks/%7D?force=true", ""),
			cfg: handlers.Config{AdminKey: adminKey}, status: 403, typ: "forbidden"},
		{desc: "force with a bad name and the right bearer", req: newRequest("DELETE", "/v1/locks/%7D?force=true", "", "Authorization", "Bearer "+adminKey),
			cfg: handlers.Config{AdminKey: adminKey}, status: 400, typ: "invalid-request", field: "name", calls: []string{"ForceRelease"}},
		// A missing token is the HTTP layer's to refuse, before the name.
		{desc: "release with a bad name and no token", req: newRequest("DELETE", "/v1/locks/%7D", ""),
			status: 400, typ: "invalid-request", field: "Lock-Token", inDetail: "required"},
	}
	// Bad names on every lock route.
	badNames := []struct{ desc, path string }{
		{"open brace", "a%7Bb"}, {"close brace", "a%7Db"}, {"space", "a%20b"},
		{"129 characters", long}, {"leading dot", ".hidden"}, {"non-ASCII", "schl%C3%BCssel"},
	}
	for _, n := range badNames {
		for _, r := range []struct{ method, suffix, call string }{
			{"POST", "", "Acquire"}, {"GET", "", "Inspect"}, {"DELETE", "", "Release"}, {"POST", "/renew", "Renew"},
		} {
			tests = append(tests, tc{desc: "name " + n.desc + " " + r.method + r.suffix,
				req:    newRequest(r.method, "/v1/locks/"+n.path+r.suffix, "", "Lock-Token", tokenA),
				status: 400, typ: "invalid-request", field: "name", calls: []string{r.call}})
		}
	}
	tests = append(tests, tc{desc: "name 128 characters", req: newRequest("GET", "/v1/locks/"+long[:128], ""), status: 200, calls: []string{"Inspect"}})

	runRequestCases(t, tests)
}

// decodeBody decodes rec's JSON body into a map, checking the media type.
func decodeBody(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	return m
}

func TestAcquire(t *testing.T) {
	tests := []struct {
		desc       string
		reentrant  bool
		token      string // Lock-Token sent
		body       string
		wantStatus int
		wantReq    locks.AcquireRequest
	}{
		{"new lease, server token, default ttl", false, "", "", http.StatusCreated, locks.AcquireRequest{}},
		{"new lease, client token, ttl", false, tokenA, `{"ttl":"1500ms"}`, http.StatusCreated, locks.AcquireRequest{Token: tokenA, TTL: 1500 * time.Millisecond}},
		{"reentrant", true, tokenA, `{"ttl":"2m"}`, http.StatusOK, locks.AcquireRequest{Token: tokenA, TTL: 2 * time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var gotName string
			var gotReq locks.AcquireRequest
			const serverToken = "server-token-0123456789"
			fake := &fakeService{AcquireFn: func(_ context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
				gotName, gotReq = name, req
				tok := req.Token
				if tok == "" {
					tok = serverToken
				}
				return locks.Lease{Name: name, Token: tok, Fence: 42, HoldCount: 1, TTL: 1500 * time.Millisecond,
					ExpiresAt: expires, Reentrant: tt.reentrant}, nil
			}}
			req := newRequest(http.MethodPost, "/v1/locks/jobs:nightly.v2", tt.body, "Lock-Token", tt.token)
			rec := serve(t, newTestRouter(t, fake, handlers.Config{}), req)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d (body %s)", rec.Code, tt.wantStatus, rec.Body)
			}
			if gotName != "jobs:nightly.v2" {
				t.Errorf("service got name %q, want jobs:nightly.v2", gotName)
			}
			if gotReq != tt.wantReq {
				t.Errorf("service got %+v, want %+v", gotReq, tt.wantReq)
			}
			wantToken := tt.token
			if wantToken == "" {
				wantToken = serverToken
			}
			if got := rec.Header().Get("Lock-Token"); got != wantToken {
				t.Errorf("Lock-Token header = %q, want %q", got, wantToken)
			}
			if got := rec.Header().Get("Location"); got != "/v1/locks/jobs:nightly.v2" {
				t.Errorf("Location = %q, want /v1/locks/jobs:nightly.v2", got)
			}
			got := decodeBody(t, rec)
			want := map[string]any{"name": "jobs:nightly.v2", "token": wantToken, "fence": 42.0, "hold_count": 1.0,
				"ttl_ms": 1500.0, "expires_at": "2026-11-23T05:00:30Z", "reentrant": tt.reentrant}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRenew(t *testing.T) {
	var gotTTL time.Duration
	var gotToken string
	fake := &fakeService{RenewFn: func(_ context.Context, name, token string, ttl time.Duration) (locks.Lease, error) {
		gotToken, gotTTL = token, ttl
		return locks.Lease{Name: name, Token: token, Fence: 9, HoldCount: 2, TTL: ttl, ExpiresAt: expires}, nil
	}}
	h := newTestRouter(t, fake, handlers.Config{})
	for _, tt := range []struct {
		body string
		want time.Duration
	}{{"", 0}, {`{}`, 0}, {`{"ttl":"45s"}`, 45 * time.Second}} {
		req := newRequest(http.MethodPost, "/v1/locks/orders/renew", tt.body, "Lock-Token", tokenA)
		rec := serve(t, h, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("body %q: status = %d, want 200 (%s)", tt.body, rec.Code, rec.Body)
		}
		if gotToken != tokenA || gotTTL != tt.want {
			t.Errorf("body %q: service got token %q ttl %s, want %q %s", tt.body, gotToken, gotTTL, tokenA, tt.want)
		}
		got := decodeBody(t, rec)
		if _, ok := got["token"]; ok {
			t.Errorf("renew answer carries the token: %s", rec.Body)
		}
		if got["hold_count"] != 2.0 || got["fence"] != 9.0 {
			t.Errorf("renew answer = %s, want hold_count 2 and fence 9", rec.Body)
		}
	}
}

func TestRelease(t *testing.T) {
	tests := []struct {
		rel  locks.Released
		want map[string]any
	}{
		{locks.Released{Released: false, HoldCount: 1}, map[string]any{"released": false, "hold_count": 1.0}},
		{locks.Released{Released: true, HoldCount: 0}, map[string]any{"released": true, "hold_count": 0.0}},
	}
	for _, tt := range tests {
		var gotToken string
		fake := &fakeService{ReleaseFn: func(_ context.Context, _, token string) (locks.Released, error) {
			gotToken = token
			return tt.rel, nil
		}}
		rec := serve(t, newTestRouter(t, fake, handlers.Config{}), newRequest(http.MethodDelete, "/v1/locks/orders", "", "Lock-Token", tokenA))
		if rec.Code != http.StatusOK || gotToken != tokenA {
			t.Fatalf("status = %d, token %q; want 200, %q", rec.Code, gotToken, tokenA)
		}
		if diff := cmp.Diff(tt.want, decodeBody(t, rec)); diff != "" {
			t.Errorf("body (-want +got):\n%s", diff)
		}
	}
}

func TestForceReleaseAnswersNoContent(t *testing.T) {
	for _, removed := range []bool{true, false} {
		var gotName string
		fake := &fakeService{ForceReleaseFn: func(_ context.Context, name string) (bool, error) { gotName = name; return removed, nil }}
		req := newRequest(http.MethodDelete, "/v1/locks/orders?force=true", "", "Authorization", "Bearer "+adminKey)
		rec := serve(t, newTestRouter(t, fake, handlers.Config{AdminKey: adminKey}), req)
		if rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
			t.Errorf("removed=%v: %d %q, want 204 and no body", removed, rec.Code, rec.Body)
		}
		if gotName != "orders" {
			t.Errorf("removed=%v: service got name %q, want orders", removed, gotName)
		}
	}
}

func TestInspect(t *testing.T) {
	held := locks.LockState{Name: "orders", Held: true, HoldCount: 2, TTL: 1500 * time.Millisecond,
		ExpiresAt: expires, Fence: 42, Owned: true}
	tests := []struct {
		desc  string
		state locks.LockState
		token string
		want  map[string]any
	}{
		{"free", locks.LockState{Name: "orders", Fence: 41}, "",
			map[string]any{"name": "orders", "held": false, "hold_count": 0.0, "ttl_ms": 0.0, "fence": 41.0, "waiters": 0.0, "fair": false}},
		{"held, no token", held, "",
			map[string]any{"name": "orders", "held": true, "hold_count": 2.0, "ttl_ms": 1500.0, "fence": 42.0, "expires_at": "2026-11-23T05:00:30Z", "waiters": 0.0, "fair": false}},
		{"held, owner's token", held, tokenA,
			map[string]any{"name": "orders", "held": true, "hold_count": 2.0, "ttl_ms": 1500.0, "fence": 42.0, "expires_at": "2026-11-23T05:00:30Z", "owned": true, "waiters": 0.0, "fair": false}},
		{"free, a token", locks.LockState{Name: "orders"}, tokenA,
			map[string]any{"name": "orders", "held": false, "hold_count": 0.0, "ttl_ms": 0.0, "fence": 0.0, "owned": false, "waiters": 0.0, "fair": false}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var gotToken string
			fake := &fakeService{InspectFn: func(_ context.Context, _, token string) (locks.LockState, error) {
				gotToken = token
				return tt.state, nil
			}}
			rec := serve(t, newTestRouter(t, fake, handlers.Config{}), newRequest(http.MethodGet, "/v1/locks/orders", "", "Lock-Token", tt.token))
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200", rec.Code)
			}
			if gotToken != tt.token {
				t.Errorf("service got token %q, want %q", gotToken, tt.token)
			}
			if diff := cmp.Diff(tt.want, decodeBody(t, rec)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
			if tt.token != "" && strings.Contains(rec.Body.String(), tt.token) {
				t.Errorf("inspect answer echoes the token: %s", rec.Body)
			}
		})
	}
}
