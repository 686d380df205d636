package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
)

// forcePrimitives are the resources of the lease primitives, each of
// which a release with ?force=true force-releases.
var forcePrimitives = []struct {
	path, release, force string // the path and the service calls of a release and a force-release
}{
	{"/v1/locks/orders", "Release", "ForceRelease"},
	{"/v1/rwlocks/orders", "ReleaseRW", "ForceReleaseRW"},
	{"/v1/semaphores/orders", "ReleaseSemaphore", "ForceReleaseSemaphore"},
	{"/v1/elections/orders", "Resign", "ForceResign"},
}

// releasingService answers every release and force-release of the lease
// primitives with a success, and records which was called.
func releasingService() (*fakeService, func() []string) {
	var mu sync.Mutex
	var calls []string
	called := func(name string) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, name)
	}
	fake := &fakeService{
		ReleaseFn: func(context.Context, string, string) (locks.Released, error) {
			called("Release")
			return locks.Released{Released: true}, nil
		},
		ForceReleaseFn: func(context.Context, string) (bool, error) { called("ForceRelease"); return true, nil },
	}
	fake.ReleaseRWFn = func(context.Context, string, string, locks.RWMode) (locks.Released, error) {
		called("ReleaseRW")
		return locks.Released{Released: true, Mode: locks.ModeWrite}, nil
	}
	fake.ForceReleaseRWFn = func(context.Context, string) (bool, error) { called("ForceReleaseRW"); return true, nil }
	fake.ReleaseSemaphoreFn = func(context.Context, string, string) (int64, error) { called("ReleaseSemaphore"); return 1, nil }
	fake.ForceReleaseSemaphoreFn = func(context.Context, string) (int64, error) { called("ForceReleaseSemaphore"); return 1, nil }
	fake.ResignFn = func(context.Context, string, string) (locks.Released, error) {
		called("Resign")
		return locks.Released{Released: true}, nil
	}
	fake.ForceResignFn = func(context.Context, string) (bool, error) { called("ForceResign"); return true, nil }
	return fake, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), calls...)
	}
}

// forceModes are the two ways a server knows its admin: a keys file (the
// writer's key has locks:write, the admin's is the admin section's "ops"),
// or only an admin key (anyone may release; the admin sends the key).
func forceModes(t *testing.T) []struct {
	desc          string
	cfg           handlers.Config
	writer, admin []string // Authorization header pairs
} {
	set := mustKeySet(t, "")
	return []struct {
		desc          string
		cfg           handlers.Config
		writer, admin []string
	}{
		{"API keys", authConfig(set), []string{"Authorization", "Bearer " + testSecret("locks-write")}, []string{"Authorization", "Bearer " + testSecret("ops")}},
		{"admin key only", handlers.Config{AdminKey: adminKey}, nil, []string{"Authorization", "Bearer " + adminKey}},
	}
}

// TestForceIsTrueOrFalseOnly: ?force= is exactly true or false, given at
// most once. Every other spelling a boolean parser would take (1, t, T,
// TRUE, True), any other word, an empty value, a repeated force and a
// query string that does not parse are a 400 naming the parameter, for the
// writer and the admin alike, on every primitive, and reach no service:
// nothing is released, nothing force-released.
func TestForceIsTrueOrFalseOnly(t *testing.T) {
	spellings := []struct{ query, field, rule string }{
		{"force=1", "force", "oneof"},
		{"force=0", "force", "oneof"},
		{"force=t", "force", "oneof"},
		{"force=T", "force", "oneof"},
		{"force=TRUE", "force", "oneof"},
		{"force=True", "force", "oneof"},
		{"force=yes", "force", "oneof"},
		{"force=", "force", "oneof"},
		{"force", "force", "oneof"},
		{"force=%20true", "force", "oneof"},
		{"force=false&force=true", "force", "duplicate"},
		{"force=true&force=true", "force", "duplicate"},
		{"force=true&force=", "force", "duplicate"},
		{"Force=true", "Force", "unknown"},
		{"FORCE=true&force=false", "FORCE", "unknown"},
		{"force=%zz", "query", "format"},
		{"force=true;x=1", "query", "format"},
	}
	for _, mode := range forceModes(t) {
		for _, p := range forcePrimitives {
			for _, sp := range spellings {
				for _, who := range []struct {
					desc    string
					headers []string
				}{{"writer", mode.writer}, {"admin", mode.admin}} {
					t.Run(mode.desc+" "+p.path+"?"+sp.query+" "+who.desc, func(t *testing.T) {
						fake, calls := releasingService()
						req := newRequest(http.MethodDelete, p.path+"?"+sp.query, "", append([]string{"Lock-Token", tokenA}, who.headers...)...)
						rec := serve(t, newTestRouter(t, fake, mode.cfg), req)
						pr := wantProblem(t, rec, req, http.StatusBadRequest, "invalid-request")
						if len(pr.Errors) != 1 || pr.Errors[0].Field != sp.field || pr.Errors[0].Rule != sp.rule {
							t.Errorf("errors = %+v, want one naming %s, rule %s", pr.Errors, sp.field, sp.rule)
						}
						if got := calls(); len(got) != 0 {
							t.Errorf("service calls = %v, want none", got)
						}
					})
				}
			}
		}
	}
}

// TestForceTrueNeedsTheAdmin: force=true force-releases for the admin
// only; the writer gets 403 and nothing is released. force=false, like no
// force, is the writer's release of its own lease.
func TestForceTrueNeedsTheAdmin(t *testing.T) {
	for _, mode := range forceModes(t) {
		for _, p := range forcePrimitives {
			tests := []struct {
				desc    string
				query   string
				headers []string
				status  int
				calls   []string
			}{
				{"writer forces", "?force=true", mode.writer, http.StatusForbidden, nil},
				{"admin forces", "?force=true", mode.admin, http.StatusNoContent, []string{p.force}},
				{"writer releases with force=false", "?force=false", mode.writer, http.StatusOK, []string{p.release}},
				{"writer releases", "", mode.writer, http.StatusOK, []string{p.release}},
			}
			for _, tt := range tests {
				t.Run(mode.desc+" "+p.path+" "+tt.desc, func(t *testing.T) {
					fake, calls := releasingService()
					req := newRequest(http.MethodDelete, p.path+tt.query, "", append([]string{"Lock-Token", tokenA}, tt.headers...)...)
					rec := serve(t, newTestRouter(t, fake, mode.cfg), req)
					if tt.status == http.StatusForbidden {
						wantProblem(t, rec, req, tt.status, "forbidden")
					} else if rec.Code != tt.status {
						t.Errorf("status = %d, want %d (body %s)", rec.Code, tt.status, rec.Body)
					}
					if diff := cmp.Diff(tt.calls, calls()); diff != "" {
						t.Errorf("service calls (-want +got):\n%s", diff)
					}
				})
			}
		}
	}
}

// logLines decodes a JSON log, one object per line.
func logLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// TestAdminActionsLogged: with API keys, every admin action is logged once
// as an "admin action" with its route pattern and name; a refused force,
// an unknown route and a release are not admin actions.
func TestAdminActionsLogged(t *testing.T) {
	set := mustKeySet(t, "")
	var logs syncBuffer
	cfg := authConfig(set)
	cfg.Logger = newJSONLogger(&logs)
	fake, _ := releasingService()
	fake.SetSemaphorePermitsFn = func(_ context.Context, name string, permits int64) (locks.SemaphoreState, error) {
		return locks.SemaphoreState{Name: name, Permits: permits}, nil
	}
	h := newTestRouter(t, fake, cfg)
	ops := []string{"Authorization", "Bearer " + testSecret("ops")}
	writer := []string{"Authorization", "Bearer " + testSecret("locks-write")}
	for _, req := range []*http.Request{
		newRequest(http.MethodDelete, "/v1/locks/a?force=true", "", ops...),
		newRequest(http.MethodDelete, "/v1/rwlocks/b?force=true", "", ops...),
		newRequest(http.MethodDelete, "/v1/semaphores/c?force=true", "", ops...),
		newRequest(http.MethodPut, "/v1/semaphores/d", `{"permits":3}`, ops...),
		newRequest(http.MethodDelete, "/v1/locks/e?force=TRUE", "", ops...),
		newRequest(http.MethodDelete, "/v1/locks/e?force=1", "", writer...),
		newRequest(http.MethodDelete, "/v1/locks/e?force=true", "", writer...),
		newRequest(http.MethodDelete, "/v1/locks/e", "", append([]string{"Lock-Token", tokenA}, writer...)...),
		newRequest(http.MethodPatch, "/v1/locks/e", "", ops...),
		newRequest(http.MethodGet, "/v1/nope", "", ops...),
	} {
		serve(t, h, req)
	}
	type action struct{ Method, Route, Name, KeyID string }
	var got []action
	for _, rec := range logLines(t, logs.String()) {
		if rec["msg"] == "admin action" {
			got = append(got, action{rec["method"].(string), rec["route"].(string), rec["name"].(string), rec["key_id"].(string)})
		}
	}
	want := []action{
		{"DELETE", "/v1/locks/{name}", "a", "ops"},
		{"DELETE", "/v1/rwlocks/{name}", "b", "ops"},
		{"DELETE", "/v1/semaphores/{name}", "c", "ops"},
		{"PUT", "/v1/semaphores/{name}", "d", "ops"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("admin actions logged (-want +got):\n%s\nlogs:\n%s", diff, logs.String())
	}
}
