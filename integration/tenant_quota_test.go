package integration

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/locks"
)

// refusal is one request a tenant is refused, and the answer it gets.
type refusal struct {
	what, method, path, body string
	headers                  []string
	status                   int
	typ                      string
}

// wantRefusalsChangeNothing sends each refusal and checks its answer, and
// that Redis holds the same bytes under the same keys after it as before:
// quota places, locks, fences, queues, waiters and the keep-alive registry.
func wantRefusalsChangeNothing(t *testing.T, e *testEnv, refusals []refusal) {
	t.Helper()
	before := e.dumps(t)
	for _, rf := range refusals {
		t.Run(rf.what, func(t *testing.T) {
			r := e.do(t, rf.method, rf.path, rf.body, rf.headers...)
			wantProblem(t, r, rf.status, rf.typ)
			if diff := cmp.Diff(before, e.dumps(t)); diff != "" {
				t.Errorf("Redis after the refusal differs (-before +after):\n%s", diff)
				before = e.dumps(t)
			}
		})
	}
}

// TestTenantRefusalsLeaveRedisAsItWas: every class of refused request of a
// tenant with quotas (bad input, a lock held, another's lease, a missing
// lease, a forbidden request, the lease quota full) leaves Redis byte for
// byte as it was; in particular no refused acquire moves the place of a
// lease the tenant holds (a keep-alive request with a 24h max_hold on a
// held lock once did, leaving the tenant refused for a day).
func TestTenantRefusalsLeaveRedisAsItWas(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile("leases: 4, waiters: 2"))))
	a := bearer(secretA)
	held := e.acquire(t, "held", `{"ttl":"1m"}`, a...)
	wantStatus(t, e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"write","ttl":"1m"}`, a...), http.StatusCreated)
	wantStatus(t, e.do(t, "POST", "/v1/semaphores/pool", `{"permits":1,"ttl":"1m"}`, a...), http.StatusCreated)
	as := func(pairs ...string) []string { return append(append([]string{}, a...), pairs...) }
	other := as("Lock-Token", locks.NewToken())
	const bad, held409, forbidden, notFound = http.StatusBadRequest, http.StatusConflict, http.StatusForbidden, http.StatusNotFound
	refusals := []refusal{
		{"ttl above the maximum", "POST", "/v1/locks/free", `{"ttl":"100h"}`, a, bad, "invalid-request"},
		{"ttl above the maximum on a held lock", "POST", "/v1/locks/held", `{"ttl":"100h"}`, a, bad, "invalid-request"},
		{"ttl above the maximum on a re-entry", "POST", "/v1/locks/held", `{"ttl":"100h"}`, as("Lock-Token", held.Token), bad, "invalid-request"},
		{"keep-alive ttl below the minimum", "POST", "/v1/locks/free", `{"ttl":"10ms","keepalive":true}`, a, bad, "invalid-request"},
		{"max_hold above the cap", "POST", "/v1/locks/held", `{"ttl":"1m","keepalive":true,"max_hold":"1000h"}`, a, bad, "invalid-request"},
		{"wait above the maximum", "POST", "/v1/locks/held", `{"ttl":"1m","wait":"100h"}`, a, bad, "invalid-request"},
		{"hold ttl above the maximum", "POST", "/v1/locks/free/hold", `{"ttl":"100h"}`, a, bad, "invalid-request"},
		{"hold wait above the maximum", "POST", "/v1/locks/held/hold", `{"ttl":"10s","wait":"100h"}`, a, bad, "invalid-request"},
		{"read/write lock without a mode", "POST", "/v1/rwlocks/catalog", `{"ttl":"1m"}`, a, bad, "invalid-request"},
		{"semaphore count above its permits", "POST", "/v1/semaphores/pool", `{"permits":1,"count":2,"ttl":"1m"}`, a, bad, "invalid-request"},
		{"keep-alive request on a held lock", "POST", "/v1/locks/held", `{"ttl":"1s","keepalive":true,"max_hold":"24h"}`, a, held409, "lock-held"},
		{"plain request on a held lock", "POST", "/v1/locks/held", `{"ttl":"1s"}`, a, held409, "lock-held"},
		{"hold of a held lock", "POST", "/v1/locks/held/hold", `{"ttl":"10s"}`, a, held409, "lock-held"},
		{"reader of a written lock", "POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"1m","keepalive":true,"max_hold":"24h"}`, a, held409, "lock-held"},
		{"permit of a full semaphore", "POST", "/v1/semaphores/pool", `{"permits":1,"ttl":"1m"}`, a, held409, "permits-unavailable"},
		{"release with another's token", "DELETE", "/v1/locks/held", "", other, held409, "not-owner"},
		{"release of a free lock", "DELETE", "/v1/locks/free", "", other, notFound, "lease-not-found"},
		{"renewal of a free lock", "POST", "/v1/locks/free/renew", `{"ttl":"1m"}`, other, notFound, "lease-not-found"},
		{"force-release without admin", "DELETE", "/v1/locks/held?force=true", "", a, forbidden, "forbidden"},
		{"a tenant's key naming a tenant", "POST", "/v1/locks/free", `{"ttl":"1m"}`, as("Latchkey-Tenant", "b"), forbidden, "forbidden"},
	}
	wantRefusalsChangeNothing(t, e, refusals)

	// The fourth lease fills the quota: then every acquire is refused with
	// a Retry-After from the leases' own ends (1m: 60s at most).
	e.acquire(t, "fourth", `{"ttl":"1m"}`, a...)
	const full = http.StatusTooManyRequests
	refusals = []refusal{
		{"lock", "POST", "/v1/locks/free", `{"ttl":"1m","keepalive":true,"max_hold":"24h"}`, a, full, "quota-exceeded"},
		{"held lock", "POST", "/v1/locks/held", `{"ttl":"1m"}`, a, full, "quota-exceeded"},
		{"hold", "POST", "/v1/locks/free/hold", `{"ttl":"10s"}`, a, full, "quota-exceeded"},
		{"reader", "POST", "/v1/rwlocks/free", `{"mode":"read","ttl":"1m"}`, a, full, "quota-exceeded"},
		{"permit", "POST", "/v1/semaphores/free", `{"permits":3,"ttl":"1m"}`, a, full, "quota-exceeded"},
	}
	wantRefusalsChangeNothing(t, e, refusals)
	r := e.do(t, "POST", "/v1/locks/free", `{"ttl":"1m"}`, a...)
	wantProblem(t, r, full, "quota-exceeded")
	if s := retryAfter(t, r); s < 1 || s > 60 {
		t.Errorf("Retry-After with four 1m leases = %ds, want 1-60", s)
	}
}
