package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// fakeRW is the read/write lock part of fakeService: one function field per
// method; a nil field answers errUnexpectedCall. Its methods refuse a bad
// name or token as the service does.
type fakeRW struct {
	AcquireRWFn      func(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error)
	RenewRWFn        func(ctx context.Context, name, token string, mode locks.RWMode, ttl time.Duration) (locks.Lease, error)
	ReleaseRWFn      func(ctx context.Context, name, token string, mode locks.RWMode) (locks.Released, error)
	ForceReleaseRWFn func(ctx context.Context, name string) (bool, error)
	InspectRWFn      func(ctx context.Context, name, token string) (locks.RWState, error)
	HoldRWFn         func(ctx context.Context, name string, req locks.AcquireRequest) (*locks.Hold, error)
}

func (f *fakeRW) AcquireRW(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
	if err := checkLockInput(name, req.Token, req.Owner); err != nil {
		return locks.Lease{}, err
	}
	if f.AcquireRWFn == nil {
		return locks.Lease{}, errUnexpectedCall
	}
	return f.AcquireRWFn(ctx, name, req)
}

func (f *fakeRW) RenewRW(ctx context.Context, name, token string, mode locks.RWMode, ttl time.Duration) (locks.Lease, error) {
	if err := checkLockInput(name, token, ""); err != nil {
		return locks.Lease{}, err
	}
	if f.RenewRWFn == nil {
		return locks.Lease{}, errUnexpectedCall
	}
	return f.RenewRWFn(ctx, name, token, mode, ttl)
}

func (f *fakeRW) ReleaseRW(ctx context.Context, name, token string, mode locks.RWMode) (locks.Released, error) {
	if err := checkLockInput(name, token, ""); err != nil {
		return locks.Released{}, err
	}
	if f.ReleaseRWFn == nil {
		return locks.Released{}, errUnexpectedCall
	}
	return f.ReleaseRWFn(ctx, name, token, mode)
}

func (f *fakeRW) ForceReleaseRW(ctx context.Context, name string) (bool, error) {
	if err := checkLockInput(name, "", ""); err != nil {
		return false, err
	}
	if f.ForceReleaseRWFn == nil {
		return false, errUnexpectedCall
	}
	return f.ForceReleaseRWFn(ctx, name)
}

func (f *fakeRW) InspectRW(ctx context.Context, name, token string) (locks.RWState, error) {
	if err := checkLockInput(name, token, ""); err != nil {
		return locks.RWState{}, err
	}
	if f.InspectRWFn == nil {
		return locks.RWState{}, errUnexpectedCall
	}
	return f.InspectRWFn(ctx, name, token)
}

func (f *fakeRW) HoldRW(ctx context.Context, name string, req locks.AcquireRequest) (*locks.Hold, error) {
	if err := checkLockInput(name, req.Token, req.Owner); err != nil {
		return nil, err
	}
	if f.HoldRWFn == nil {
		return nil, errUnexpectedCall
	}
	return f.HoldRWFn(ctx, name, req)
}

// rwService answers the read/write lock calls as a lock would, with what
// it was asked recorded in got.
func rwService(got *locks.AcquireRequest, gotMode *locks.RWMode) *fakeService {
	return &fakeService{fakeRW: fakeRW{
		AcquireRWFn: func(_ context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
			*got = req
			return locks.Lease{Name: name, Token: "server-token-0123456789", Fence: 7, HoldCount: 1,
				TTL: 30 * time.Second, ExpiresAt: expires, Mode: req.Mode, Reentrant: req.Token != ""}, nil
		},
		RenewRWFn: func(_ context.Context, name, token string, mode locks.RWMode, ttl time.Duration) (locks.Lease, error) {
			*gotMode = mode
			return locks.Lease{Name: name, Fence: 7, HoldCount: 1, TTL: ttl, ExpiresAt: expires, Mode: locks.ModeRead}, nil
		},
		ReleaseRWFn: func(_ context.Context, _, _ string, mode locks.RWMode) (locks.Released, error) {
			*gotMode = mode
			return locks.Released{Released: true, Mode: locks.ModeWrite}, nil
		},
		ForceReleaseRWFn: func(context.Context, string) (bool, error) { return true, nil },
		InspectRWFn: func(_ context.Context, name, token string) (locks.RWState, error) {
			st := locks.RWState{Name: name, Readers: 2, Fence: 9, WaitingWriters: 1}
			if token != "" {
				st.Owned, st.Mode, st.Modes, st.HoldCount, st.TTL = true, locks.ModeRead, []locks.RWMode{locks.ModeRead}, 1, time.Second
				st.ExpiresAt = expires
			}
			return st, nil
		},
	}}
}

func TestRWLockContract(t *testing.T) {
	var got locks.AcquireRequest
	var gotMode locks.RWMode
	fake := rwService(&got, &gotMode)
	cfg := handlers.Config{AdminKey: adminKey}
	h := newTestRouter(t, fake, cfg)

	req := newRequest("POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"10s","wait":"1s","fair":true,"owner":"me"}`)
	rec := serve(t, h, req)
	if rec.Code != http.StatusCreated || rec.Header().Get("Location") != "/v1/rwlocks/catalog" || rec.Header().Get("Lock-Token") == "" {
		t.Fatalf("acquire: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	if got.Mode != locks.ModeRead || got.TTL != 10*time.Second || got.Wait != time.Second || !got.Fair || got.Owner != "me" {
		t.Errorf("service asked %+v", got)
	}
	var lease map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &lease); err != nil || lease["mode"] != "read" {
		t.Errorf("lease body %s: mode missing (%v)", rec.Body, err)
	}
	rec = serve(t, h, newRequest("POST", "/v1/rwlocks/catalog", `{"mode":"write"}`, "Lock-Token", tokenA))
	if rec.Code != http.StatusOK {
		t.Errorf("re-entry: %d, want 200", rec.Code)
	}

	rec = serve(t, h, newRequest("GET", "/v1/rwlocks/catalog", "", "Lock-Token", tokenA))
	var st map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != 200 {
		t.Fatalf("get: %d %s", rec.Code, rec.Body)
	}
	if st["readers"] != 2.0 || st["mode"] != "read" || st["owned"] != true || st["waiters"].(map[string]any)["write"] != 1.0 {
		t.Errorf("state = %v", st)
	}

	rec = serve(t, h, newRequest("POST", "/v1/rwlocks/catalog/renew?mode=read", `{"ttl":"5s"}`, "Lock-Token", tokenA))
	if rec.Code != 200 || gotMode != locks.ModeRead {
		t.Errorf("renew: %d mode %q", rec.Code, gotMode)
	}
	rec = serve(t, h, newRequest("DELETE", "/v1/rwlocks/catalog", "", "Lock-Token", tokenA))
	if rec.Code != 200 || gotMode != "" {
		t.Errorf("release: %d mode %q", rec.Code, gotMode)
	}
	rec = serve(t, h, newRequest("DELETE", "/v1/rwlocks/catalog?force=true", "", "Authorization", "Bearer "+adminKey))
	if rec.Code != http.StatusNoContent {
		t.Errorf("force: %d", rec.Code)
	}
}

func TestRWLockProblems(t *testing.T) {
	tests := []struct {
		desc   string
		req    *http.Request
		err    error
		status int
		typ    string
		field  string
	}{
		{"mode missing", newRequest("POST", "/v1/rwlocks/catalog", `{"ttl":"1s"}`), nil, 400, "invalid-request", "mode"},
		{"mode unknown", newRequest("POST", "/v1/rwlocks/catalog", `{"mode":"both"}`), nil, 400, "invalid-request", "mode"},
		{"no body", newRequest("POST", "/v1/rwlocks/catalog", ""), nil, 400, "invalid-request", "mode"},
		{"bad ttl", newRequest("POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"soon"}`), nil, 400, "invalid-request", "ttl"},
		{"unknown field", newRequest("POST", "/v1/rwlocks/catalog", `{"mode":"read","permits":3}`), nil, 400, "invalid-request", ""},
		{"bad name", newRequest("POST", "/v1/rwlocks/a%7Bb", `{"mode":"read"}`), nil, 400, "invalid-request", "name"},
		{"upgrade", newRequest("POST", "/v1/rwlocks/catalog", `{"mode":"write"}`, "Lock-Token", tokenA),
			&locks.UpgradeError{Name: "catalog"}, 409, "upgrade-not-supported", ""},
		{"held", newRequest("POST", "/v1/rwlocks/catalog", `{"mode":"write"}`),
			&locks.HeldError{Name: "catalog", RetryAfter: time.Second}, 409, "lock-held", ""},
		{"fairness", newRequest("POST", "/v1/rwlocks/catalog", `{"mode":"read"}`),
			&locks.ModeError{Name: "catalog", Fair: true}, 409, "lock-mode-mismatch", ""},
		{"store down", newRequest("POST", "/v1/rwlocks/catalog", `{"mode":"read"}`),
			store.ErrUnavailable, 503, "store-unavailable", ""},
		{"release without token", newRequest("DELETE", "/v1/rwlocks/catalog", ""), nil, 400, "invalid-request", "Lock-Token"},
		{"release gone", newRequest("DELETE", "/v1/rwlocks/catalog", "", "Lock-Token", tokenA),
			store.ErrNotFound, 404, "lease-not-found", ""},
		{"release other's", newRequest("DELETE", "/v1/rwlocks/catalog", "", "Lock-Token", tokenA),
			locks.ErrNotOwner, 409, "not-owner", ""},
		{"force without admin", newRequest("DELETE", "/v1/rwlocks/catalog?force=true", ""), nil, 403, "forbidden", ""},
		{"renew gone", newRequest("POST", "/v1/rwlocks/catalog/renew", "", "Lock-Token", tokenA),
			store.ErrNotFound, 404, "lease-not-found", ""},
		{"hold without mode", newRequest("POST", "/v1/rwlocks/catalog/hold", `{"ttl":"1s"}`), nil, 400, "invalid-request", "mode"},
		{"hold held", newRequest("POST", "/v1/rwlocks/catalog/hold", `{"mode":"write"}`),
			&locks.HeldError{Name: "catalog", RetryAfter: time.Second}, 409, "lock-held", ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			fail := func() error {
				if tt.err == nil {
					return errors.New("service called for a request the handler must refuse")
				}
				return tt.err
			}
			fake := &fakeService{fakeRW: fakeRW{
				AcquireRWFn: func(context.Context, string, locks.AcquireRequest) (locks.Lease, error) {
					return locks.Lease{}, fail()
				},
				ReleaseRWFn: func(context.Context, string, string, locks.RWMode) (locks.Released, error) {
					return locks.Released{}, fail()
				},
				RenewRWFn: func(context.Context, string, string, locks.RWMode, time.Duration) (locks.Lease, error) {
					return locks.Lease{}, fail()
				},
				HoldRWFn: func(context.Context, string, locks.AcquireRequest) (*locks.Hold, error) { return nil, fail() },
			}}
			rec := serve(t, newTestRouter(t, fake, handlers.Config{AdminKey: adminKey}), tt.req)
			p := wantProblem(t, rec, tt.req, tt.status, tt.typ)
			if tt.field != "" {
				wantField(t, p, tt.field)
			}
		})
	}
}

// TestRWModeIsReadOrWriteOnly: a release's or renew's ?mode= is exactly
// read or write, given at most once, as ?force= is: a repeated mode, an
// empty one, another case, and a parameter Mode are a 400 naming the
// parameter (the value quoted in the detail) and reach no service, rather
// than the first mode winning or an empty one passing for none.
func TestRWModeIsReadOrWriteOnly(t *testing.T) {
	spellings := []struct{ query, field, rule, inDetail string }{
		{"mode=read&mode=write", "mode", "duplicate", "2 times"},
		{"mode=write&mode=write", "mode", "duplicate", "2 times"},
		{"mode=", "mode", "oneof", `got ""`},
		{"mode", "mode", "oneof", `got ""`},
		{"mode=READ", "mode", "oneof", `got "READ"`},
		{"mode=both", "mode", "oneof", `got "both"`},
		{"Mode=read", "Mode", "unknown", `"Mode"`},
		{"mode=%zz", "query", "format", "malformed"},
	}
	for _, op := range []struct{ method, path, body string }{
		{http.MethodDelete, "/v1/rwlocks/dm", ""},
		{http.MethodDelete, "/v1/rwlocks/dm?force=true&", ""},
		{http.MethodPost, "/v1/rwlocks/dm/renew", `{"ttl":"5s"}`},
	} {
		for _, sp := range spellings {
			sep := "?"
			if strings.Contains(op.path, "?") {
				sep = ""
			}
			target := op.path + sep + sp.query
			t.Run(op.method+" "+target, func(t *testing.T) {
				fake := &fakeService{fakeRW: fakeRW{
					ReleaseRWFn: func(context.Context, string, string, locks.RWMode) (locks.Released, error) {
						t.Error("ReleaseRW called")
						return locks.Released{}, nil
					},
					ForceReleaseRWFn: func(context.Context, string) (bool, error) {
						t.Error("ForceReleaseRW called")
						return true, nil
					},
					RenewRWFn: func(context.Context, string, string, locks.RWMode, time.Duration) (locks.Lease, error) {
						t.Error("RenewRW called")
						return locks.Lease{}, nil
					},
				}}
				req := newRequest(op.method, target, op.body, "Lock-Token", tokenA, "Authorization", "Bearer "+adminKey)
				rec := serve(t, newTestRouter(t, fake, handlers.Config{AdminKey: adminKey}), req)
				p := wantProblem(t, rec, req, http.StatusBadRequest, "invalid-request")
				if len(p.Errors) != 1 || p.Errors[0].Field != sp.field || p.Errors[0].Rule != sp.rule {
					t.Errorf("errors = %+v, want one naming %s, rule %s", p.Errors, sp.field, sp.rule)
				}
				if !strings.Contains(p.Detail, sp.inDetail) {
					t.Errorf("detail %q does not say %q", p.Detail, sp.inDetail)
				}
			})
		}
	}
}
