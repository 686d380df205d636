package locks_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// TestTenantNamespaces: the same name in two tenants and in the shared
// namespace is three locks, each under its own key prefix; a tenant's
// keep-alive registry entry carries its tenant.
func TestTenantNamespaces(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	prefix := locks.KeyPrefix(svc)
	ctxA, ctxB := store.WithTenant(t.Context(), "a"), store.WithTenant(t.Context(), "b")
	la, err := svc.Acquire(ctxA, "orders", locks.AcquireRequest{TTL: time.Minute, Keepalive: true})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := svc.Acquire(ctxB, "orders", locks.AcquireRequest{TTL: time.Minute})
	if err != nil {
		t.Fatalf("b's orders: %v, want a grant of its own", err)
	}
	if _, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{TTL: time.Minute}); err != nil {
		t.Fatalf("shared orders: %v, want a grant of its own", err)
	}
	for _, p := range []string{store.TenantPrefix(prefix, "a"), store.TenantPrefix(prefix, "b"), prefix} {
		if !m.Exists(locks.KeysOf(p, "orders").Lock) {
			t.Errorf("no lock key %s", locks.KeysOf(p, "orders").Lock)
		}
	}
	members, err := m.ZMembers(locks.RegistryKey(prefix))
	if err != nil || len(members) != 1 || members[0] != la.Token+":orders@a" {
		t.Errorf("registry = %v (%v), want [%s:orders@a]", members, err, la.Token)
	}
	if _, err := svc.Release(ctxB, "orders", la.Token); !errors.Is(err, locks.ErrNotOwner) {
		t.Errorf("b releasing with a's token: %v, want not-owner (b's orders is b's)", err)
	}
	if _, err := svc.ForceRelease(ctxB, "orders"); err != nil {
		t.Fatal(err)
	}
	st, err := svc.Inspect(ctxA, "orders", la.Token)
	if err != nil || !st.Held || !st.Owned {
		t.Errorf("a's orders after b's force-release: %+v, %v; want held by a", st, err)
	}
	if st, _ := svc.Inspect(ctxB, "orders", lb.Token); st.Held {
		t.Errorf("b's orders after its force-release: %+v, want free", st)
	}
	if _, err := svc.Release(ctxA, "orders", la.Token); err != nil {
		t.Fatal(err)
	}
	if members, _ := m.ZMembers(locks.RegistryKey(prefix)); len(members) != 0 {
		t.Errorf("registry after a's release = %v, want empty", members)
	}
}

func TestParseTenantMember(t *testing.T) {
	tok := strings.Repeat("t", 22)
	tests := []struct {
		m, tag, name, tenant string
		ok                   bool
	}{
		{tok + ":orders", "", "orders", "", true},
		{tok + ":orders@billing", "", "orders", "billing", true},
		{"rw/" + tok + ":job:1@team-2", "rw", "job:1", "team-2", true},
		{tok + ":orders@", "", "", "", false},
		{tok + ":orders@Billing", "", "", "", false},
		{tok + ":orders@a:b", "", "", "", false},
		{tok + ":orders@" + strings.Repeat("a", 33), "", "", "", false},
	}
	for _, tt := range tests {
		tag, name, tenant, ok := locks.ParseTenantMember(tt.m)
		if ok != tt.ok || ok && (tag != tt.tag || name != tt.name || tenant != tt.tenant) {
			t.Errorf("ParseTenantMember(%q) = %q, %q, %q, %v; want %q, %q, %q, %v", tt.m, tag, name, tenant, ok, tt.tag, tt.name, tt.tenant, tt.ok)
		}
	}
}
