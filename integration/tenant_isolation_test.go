package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// TestTenantIsolation: tenants a and b use the same names without ever
// meeting: each holds its own "orders"; neither sees, releases,
// force-releases or spends the other's; every key a's requests made lives
// under a's prefix.
func TestTenantIsolation(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile(""))), withPolicies())
	a, b := bearer(secretA), bearer(secretB)

	la := e.acquire(t, "orders", `{"ttl":"1m"}`, a...)
	lb := e.acquire(t, "orders", `{"ttl":"1m"}`, b...) // not a conflict: another tenant's lock
	if st := e.inspect(t, "orders", append(a, "Lock-Token", la.Token)...); !st.Held || !st.ownedIs(true) {
		t.Errorf("a's view of its orders: %v, want held and owned", st)
	}
	if st := e.inspect(t, "orders", append(a, "Lock-Token", lb.Token)...); !st.ownedIs(false) {
		t.Errorf("a's view with b's token: %v, want not owned", st)
	}
	// a cannot release or renew b's lease with b's token: in a's namespace it does not exist.
	r := e.do(t, "DELETE", "/v1/locks/orders", "", append(a, "Lock-Token", lb.Token)...)
	wantProblem(t, r, http.StatusConflict, "not-owner")
	e.release(t, "orders", la.Token, a...)
	if st := e.inspect(t, "orders", a...); st.Held {
		t.Errorf("a's orders after a's release: %v, want free (b's is b's)", st)
	}
	if st := e.inspect(t, "orders", append(b, "Lock-Token", lb.Token)...); !st.Held || !st.ownedIs(true) {
		t.Errorf("b's orders after a's release: %v, want still held by b", st)
	}
	// a's admin key force-releases a's orders only.
	r = e.do(t, "DELETE", "/v1/locks/orders?force=true", "", bearer(secretAdminA)...)
	wantStatus(t, r, http.StatusNoContent)
	if st := e.inspect(t, "orders", b...); !st.Held {
		t.Errorf("b's orders after a's force-release: %v, want still held", st)
	}
	// The shared namespace (an admin-section key without Latchkey-Tenant)
	// has no orders either; with Latchkey-Tenant: b it sees b's.
	if st := e.inspect(t, "orders", bearer(secretOps)...); st.Held {
		t.Errorf("shared namespace: %v, want free", st)
	}
	if st := e.inspect(t, "orders", append(bearer(secretOps), "Latchkey-Tenant", "b")...); !st.Held {
		t.Errorf("ops acting for b: %v, want b's lease", st)
	}

	// Rate limits: a spends its counter only.
	check := `{"key":"k","limit":1,"window":"1m"}`
	wantStatus(t, e.do(t, "POST", "/v1/ratelimit/check", check, a...), http.StatusOK)
	wantStatus(t, e.do(t, "POST", "/v1/ratelimit/check", check, a...), http.StatusTooManyRequests)
	wantStatus(t, e.do(t, "POST", "/v1/ratelimit/check", check, b...), http.StatusOK)

	// Redis: every key a's requests made is under a's prefix, b's under b's.
	for _, k := range e.keys(t) {
		if !strings.HasPrefix(k, store.TenantPrefix(e.Prefix, "a")) && !strings.HasPrefix(k, store.TenantPrefix(e.Prefix, "b")) {
			t.Errorf("key %s is in no tenant's namespace", k)
		}
	}
	if n, _ := e.RDB.Exists(t.Context(), locks.KeysOf(store.TenantPrefix(e.Prefix, "b"), "orders").Lock).Result(); n != 1 {
		t.Errorf("b's orders lock key under b's prefix: exists %d, want 1", n)
	}
}

// TestTenantWakeups: a waiter of tenant a is woken by a's release, and
// listens on a's channel only: b's release of its own "orders" publishes
// on b's channel, where no one of a listens.
func TestTenantWakeups(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile(""))))
	a, b := bearer(secretA), bearer(secretB)
	la := e.acquire(t, "orders", `{"ttl":"1m"}`, a...)
	lb := e.acquire(t, "orders", `{"ttl":"1m"}`, b...)
	done := make(chan response, 1)
	go func() { done <- e.send(t.Context(), "POST", "/v1/locks/orders", `{"ttl":"1m","wait":"30s"}`, a...) }()
	eventually(t, 10e9, "a's waiter is registered", func() bool { return e.inspect(t, "orders", a...).Waiters == 1 })
	if st := e.inspect(t, "orders", b...); st.Waiters != 0 {
		t.Errorf("b's orders counts %d waiters, want 0 (a's waiter is a's)", st.Waiters)
	}
	chA := locks.KeysOf(store.TenantPrefix(e.Prefix, "a"), "orders").Channel
	chB := locks.KeysOf(store.TenantPrefix(e.Prefix, "b"), "orders").Channel
	if subs := subscribers(t, e.RDB, chA, chB); subs[chA] != 1 || subs[chB] != 0 {
		t.Errorf("subscribers: a's channel %d, b's %d; want 1 and 0", subs[chA], subs[chB])
	}
	e.release(t, "orders", lb.Token, b...)
	if st := e.inspect(t, "orders", a...); !st.Held || st.Waiters != 1 {
		t.Errorf("a's orders after b's release: %v, want still held with its waiter", st)
	}
	e.release(t, "orders", la.Token, a...)
	r := <-done
	wantStatus(t, r, http.StatusCreated)
}

// TestTenantKeepaliveRenewedElsewhere: a tenant's keep-alive lease taken on
// one instance is renewed by another instance's renewer, which knows
// nothing of the request: the lease's expiry moves on, and it stays the
// tenant's.
func TestTenantKeepaliveRenewedElsewhere(t *testing.T) {
	keys := withKeysFile(writeKeysFile(t, tenantsFile("")))
	a := newTestEnv(t, keys)
	a.acquire(t, "orders", `{"ttl":"1m"}`, bearer(secretB)...) // b's orders: not the one renewed
	l := a.acquire(t, "orders", `{"ttl":"2s","keepalive":true}`, bearer(secretA)...)
	b := newTestEnv(t, beside(a), keys, withRenewer(instancePoll))
	eventually(t, 20*time.Second, "b's renewer renews a's lease twice", func() bool {
		return metricValue(t, b, "latchkey_keepalive_renewals_total") >= 2
	})
	st := b.inspect(t, "orders", append(bearer(secretA), "Lock-Token", l.Token)...)
	if !st.ownedIs(true) || st.ExpiresAt == nil || !st.ExpiresAt.After(l.ExpiresAt) {
		t.Errorf("a's lease after b's renewals: %v, want owned with an expiry past %s", st, l.ExpiresAt)
	}
	if st := b.inspect(t, "orders", bearer(secretB)...); st.Keepalive != nil || st.TTLMS > 60_000 {
		t.Errorf("b's orders: %v, want its own plain lease", st)
	}
}
