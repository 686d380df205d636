package integration

import (
	"net/http"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// TestTenantReadWriteLocksAndSemaphores: read/write locks and semaphores
// live in their tenant's namespace like locks: the same name in two tenants
// is two primitives, every key is under the tenant's prefix, and a token of
// one tenant means nothing in the other's.
func TestTenantReadWriteLocksAndSemaphores(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile(""))))
	a, b := bearer(secretA), bearer(secretB)

	wa := e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"write","ttl":"1m"}`, a...)
	wantStatus(t, wa, http.StatusCreated)
	// b's catalog is another lock: b's writer is granted too.
	wb := e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"write","ttl":"1m"}`, b...)
	wantStatus(t, wb, http.StatusCreated)
	// a cannot release b's write lease with b's token: in a's namespace
	// the token owns nothing, and a's own writer holds a's catalog.
	wantProblem(t, e.do(t, "DELETE", "/v1/rwlocks/catalog", "", append(a, "Lock-Token", wb.Token())...),
		http.StatusConflict, "not-owner")

	sa := e.do(t, "POST", "/v1/semaphores/pool", `{"permits":1,"ttl":"1m"}`, a...)
	wantStatus(t, sa, http.StatusCreated)
	// b's pool has its own capacity and permits: another N is no mismatch.
	wantStatus(t, e.do(t, "POST", "/v1/semaphores/pool", `{"permits":2,"ttl":"1m"}`, b...), http.StatusCreated)
	r := e.do(t, "GET", "/v1/semaphores/pool", "", b...)
	wantStatus(t, r, http.StatusOK)
	if !strings.Contains(string(r.Body), `"in_use":1`) || !strings.Contains(string(r.Body), `"permits":2`) {
		t.Errorf("b's pool: %s, want 2 permits with 1 in use", r.Body)
	}

	for _, tenant := range []string{"a", "b"} {
		if keys := allKeys(t, e.RDB, store.TenantPrefix(e.Prefix, tenant)+"*{catalog}"); len(keys) == 0 {
			t.Errorf("tenant %s's catalog keys: none, want some under its prefix", tenant)
		}
		if keys := allKeys(t, e.RDB, store.TenantPrefix(e.Prefix, tenant)+"*{pool}"); len(keys) == 0 {
			t.Errorf("tenant %s's pool keys: none, want some under its prefix", tenant)
		}
	}
	if keys := allKeys(t, e.RDB, e.Prefix+"rw:*"); len(keys) != 0 {
		t.Errorf("read/write lock keys outside every tenant: %v", keys)
	}
	if keys := allKeys(t, e.RDB, e.Prefix+"sem:*"); len(keys) != 0 {
		t.Errorf("semaphore keys outside every tenant: %v", keys)
	}
}

// TestTenantLeaseQuotaCountsEveryHolder: each reader of a read/write lock
// and each permit lease of a semaphore is one of the tenant's leases; a
// released one gives its place back, and a tenant at its quota does not
// hold up another.
func TestTenantLeaseQuotaCountsEveryHolder(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile("leases: 3"))))
	a, b := bearer(secretA), bearer(secretB)

	r1 := e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"1m"}`, a...)
	wantStatus(t, r1, http.StatusCreated)
	r2 := e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"1m"}`, a...)
	wantStatus(t, r2, http.StatusCreated)
	// A re-entry with a reader's own token takes no new place.
	wantStatus(t, e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"1m"}`, append(a, "Lock-Token", r1.Token())...),
		http.StatusOK)
	p1 := e.do(t, "POST", "/v1/semaphores/pool", `{"permits":5,"ttl":"1m"}`, a...)
	wantStatus(t, p1, http.StatusCreated)
	places := func() int64 {
		n, err := e.RDB.ZCard(t.Context(), locks.LeaseQuotaKey(e.Prefix, "a")).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := places(); n != 3 {
		t.Errorf("a's lease places with two readers and one permit lease: %d, want 3", n)
	}
	wantProblem(t, e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"1m"}`, a...),
		http.StatusTooManyRequests, "quota-exceeded")
	wantProblem(t, e.do(t, "POST", "/v1/semaphores/pool", `{"permits":5,"ttl":"1m"}`, a...),
		http.StatusTooManyRequests, "quota-exceeded")
	// b has no lease quota and is not held up by a's.
	for range 4 {
		wantStatus(t, e.do(t, "POST", "/v1/semaphores/pool", `{"permits":5,"ttl":"1m"}`, b...), http.StatusCreated)
	}

	// The reentered reader releases twice; its place goes with its last hold.
	wantStatus(t, e.do(t, "DELETE", "/v1/rwlocks/catalog", "", append(a, "Lock-Token", r1.Token())...), http.StatusOK)
	if n := places(); n != 3 {
		t.Errorf("a's lease places after one of two holds is released: %d, want 3", n)
	}
	wantStatus(t, e.do(t, "DELETE", "/v1/rwlocks/catalog", "", append(a, "Lock-Token", r1.Token())...), http.StatusOK)
	wantStatus(t, e.do(t, "DELETE", "/v1/semaphores/pool", "", append(a, "Lock-Token", p1.Token())...), http.StatusOK)
	if n := places(); n != 1 {
		t.Errorf("a's lease places after a reader and the permit lease are released: %d, want 1", n)
	}
	wantStatus(t, e.do(t, "POST", "/v1/semaphores/pool", `{"permits":5,"ttl":"1m"}`, a...), http.StatusCreated)
	wantStatus(t, e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"1m"}`, a...), http.StatusCreated)
	if n := places(); n != 3 {
		t.Errorf("a's lease places at the end: %d, want 3", n)
	}
}
