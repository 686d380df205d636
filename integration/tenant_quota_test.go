package integration

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestTenantWaiterSharesNoPlaceWithItsHolder: a waiter of the tenant
// holding a lock has no share in the holder's place. Quota 2: a and k are
// held, a second client waits for k while three others keep asking for
// other names; once k is released exactly one of them (or the waiter) gets
// the free place, and the tenant never holds more than 2. (Places were
// once named after the lock: the waiter was granted k on the place k's
// release gave back, which another name had taken meanwhile.)
func TestTenantWaiterSharesNoPlaceWithItsHolder(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile("leases: 2"))))
	a := bearer(secretA)
	e.acquire(t, "a", `{"ttl":"1m"}`, a...)
	k := e.acquire(t, "k", `{"ttl":"1m"}`, a...)
	waited := make(chan response, 1)
	go func() { waited <- e.send(t.Context(), "POST", "/v1/locks/k", `{"ttl":"1m","wait":"30s"}`, a...) }()
	eventually(t, 10*time.Second, "the waiter for k is registered", func() bool { return e.inspect(t, "k", a...).Waiters == 1 })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	granted := make(chan string, 3)
	for i := range 3 {
		name := fmt.Sprintf("other-%d", i)
		wg.Go(func() {
			for {
				r := e.send(t.Context(), "POST", "/v1/locks/"+name, `{"ttl":"1m"}`, a...)
				if r.Status == http.StatusCreated {
					granted <- name
					return
				}
				if r.Status != http.StatusTooManyRequests {
					t.Errorf("%s: status %d, want 201 or 429: %s", name, r.Status, r.Body)
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
	}
	e.release(t, "k", k.Token, a...)
	w := <-waited
	got := 0
	switch w.Status {
	case http.StatusCreated:
		got++
	case http.StatusTooManyRequests:
		// Another name took the place k gave back: the waiter, granted k
		// with no place free, gave k back and was refused.
		wantProblem(t, w, http.StatusTooManyRequests, "quota-exceeded")
		select {
		case <-granted:
			got++
		case <-time.After(10 * time.Second):
			t.Errorf("the waiter was refused, and no other name was granted the free place")
		}
	default:
		t.Fatalf("the waiter's answer: %d %s, want 201 or 429", w.Status, w.Body)
	}
	close(stop)
	wg.Wait()
	close(granted)
	for range granted {
		got++
	}
	if got != 1 {
		t.Errorf("leases granted after k's release: %d, want 1 (a's and one more make the quota of 2)", got)
	}
	if n := e.RDB.ZCard(t.Context(), locks.LeaseQuotaKey(e.Prefix, "a")).Val(); n != 2 {
		t.Errorf("a's lease places: %d, want 2", n)
	}
	held := 0
	for _, name := range []string{"a", "k", "other-0", "other-1", "other-2"} {
		if e.inspect(t, name, a...).Held {
			held++
		}
	}
	if held != 2 {
		t.Errorf("a's locks held: %d, want 2", held)
	}
	// Once every answer is in, the tenant is at its quota.
	wantProblem(t, e.do(t, "POST", "/v1/locks/extra", `{"ttl":"1m"}`, a...), http.StatusTooManyRequests, "quota-exceeded")
}

// TestTenantQuotaRetryAfterIsTheFirstEnd: a tenant at its waiter quota is
// told to retry when the first wait ends (a 20s wait: 20s at most), not at
// the longer bound its place was once given (a minute more).
func TestTenantQuotaRetryAfterIsTheFirstEnd(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile("waiters: 1"))))
	a := bearer(secretA)
	busy := e.acquire(t, "busy", `{"ttl":"1m"}`, a...)
	waited := make(chan response, 1)
	go func() { waited <- e.send(t.Context(), "POST", "/v1/locks/busy", `{"ttl":"1m","wait":"20s"}`, a...) }()
	eventually(t, 10*time.Second, "the waiter is registered", func() bool { return e.inspect(t, "busy", a...).Waiters == 1 })
	r := e.do(t, "POST", "/v1/locks/busy", `{"ttl":"1m","wait":"20s"}`, a...)
	wantProblem(t, r, http.StatusTooManyRequests, "quota-exceeded")
	if s := retryAfter(t, r); s < 1 || s > 20 {
		t.Errorf("Retry-After with one 20s wait = %ds, want 1-20", s)
	}
	e.release(t, "busy", busy.Token, a...)
	wantStatus(t, <-waited, http.StatusCreated)
}

// TestTenantLeasePlaceEndsWithItsLease: a lease's place ends when the lease
// does (its TTL, or its max-hold deadline when kept alive), moves with a
// renewal, and is given back with the lease: on release, at the end of a
// hold, and on a force-release of any primitive, every evicted lease's.
func TestTenantLeasePlaceEndsWithItsLease(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile("leases: 10"))))
	a, admin := bearer(secretA), bearer(secretAdminA)
	key := locks.LeaseQuotaKey(e.Prefix, "a")
	// wantEnd checks the place of token ends at end, give or take the
	// round trip between the lease's script and its place's.
	wantEnd := func(what, token string, end time.Time) {
		t.Helper()
		var place string
		for _, m := range e.RDB.ZRange(t.Context(), key, 0, -1).Val() {
			if strings.Contains(m, ":"+token+":") {
				place = m
			}
		}
		if place == "" {
			t.Fatalf("%s: no place for the lease in %v", what, e.RDB.ZRange(t.Context(), key, 0, -1).Val())
		}
		got := time.UnixMilli(int64(e.RDB.ZScore(t.Context(), key, place).Val()))
		if got.Before(end) || got.After(end.Add(10*time.Second)) {
			t.Errorf("%s: the place ends at %s, the lease at %s", what, got.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano))
		}
	}
	places := func() int64 { return e.RDB.ZCard(t.Context(), key).Val() }

	l := e.acquire(t, "plain", `{"ttl":"10s"}`, a...)
	wantEnd("a 10s lease", l.Token, l.ExpiresAt)
	r := e.do(t, "POST", "/v1/locks/plain/renew", `{"ttl":"50s"}`, append(a, "Lock-Token", l.Token)...)
	wantStatus(t, r, http.StatusOK)
	wantEnd("renewed to 50s", l.Token, decodeAs[leaseJSON](t, r).ExpiresAt)
	kept := e.acquire(t, "kept", `{"ttl":"5s","keepalive":true,"max_hold":"2m"}`, a...)
	wantEnd("a keep-alive lease", kept.Token, kept.Keepalive.MaxHoldUntil)
	e.release(t, "kept", kept.Token, a...)
	if n := places(); n != 1 {
		t.Errorf("places after the keep-alive lease's release: %d, want 1", n)
	}

	h := e.openHold(t, "held", `{"ttl":"10s"}`, a...)
	wantStatus(t, response{Status: h.Status, Body: []byte(h.Body)}, http.StatusOK)
	if n := places(); n != 2 {
		t.Errorf("places with a hold: %d, want 2", n)
	}
	h.close()
	eventually(t, 10*time.Second, "the hold's place is given back once it ends", func() bool { return places() == 1 })

	for range 2 {
		wantStatus(t, e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"1m"}`, a...), http.StatusCreated)
		wantStatus(t, e.do(t, "POST", "/v1/semaphores/pool", `{"permits":2,"ttl":"1m"}`, a...), http.StatusCreated)
	}
	wantStatus(t, e.do(t, "POST", "/v1/locks/forced", `{"ttl":"1m"}`, a...), http.StatusCreated)
	// A lock whose name ends another's keeps its place.
	wantStatus(t, e.do(t, "POST", "/v1/locks/x:forced", `{"ttl":"1m"}`, a...), http.StatusCreated)
	if n := places(); n != 7 {
		t.Errorf("places with two readers, two permit leases and two more locks: %d, want 7", n)
	}
	for _, path := range []string{"/v1/rwlocks/catalog", "/v1/semaphores/pool", "/v1/locks/forced"} {
		wantStatus(t, e.do(t, "DELETE", path+"?force=true", "", admin...), http.StatusNoContent)
	}
	if n := places(); n != 2 {
		t.Errorf("places after the force-releases: %d, want 2 (plain and x:forced)", n)
	}
}
