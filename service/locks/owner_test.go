package locks_test

import (
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/service/locks"
)

// lockHashFields returns the field names of lock name's hash.
func lockHashFields(t *testing.T, m *miniredis.Miniredis, name string) []string {
	t.Helper()
	for _, k := range m.Keys() {
		if strings.HasSuffix(k, "lock:{"+name+"}") {
			fields, err := m.HKeys(k)
			if err != nil {
				t.Fatal(err)
			}
			return fields
		}
	}
	t.Fatalf("no lock hash for %q among %q", name, m.Keys())
	return nil
}

func TestOwnerAndGrantedAtAreShownWhileHeld(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	const owner = "billing-worker 7 (host ß-12) «nightly»"
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA, TTL: 10 * time.Second, Owner: owner})
	m.FastForward(2 * time.Second)
	m.SetTime(t0.Add(2 * time.Second))
	for _, token := range []string{"", tokenA, tokenB} {
		st := mustInspect(t, svc, "orders", token)
		if st.Owner != owner || !st.GrantedAt.Equal(t0) {
			t.Errorf("Inspect with token %q: Owner %q, GrantedAt %s; want %q and the grant's Redis time %s",
				token, st.Owner, st.GrantedAt, owner, t0)
		}
	}
	if got := lockHashFields(t, m, "orders"); !containsField(got, "o") || containsField(got, "g") {
		t.Errorf("lock hash fields %q: want o (the owner) and no g (the grant time is the fence's)", got)
	}

	if _, err := svc.Release(t.Context(), "orders", l.Token); err != nil {
		t.Fatal(err)
	}
	if st := mustInspect(t, svc, "orders", ""); st.Owner != "" || !st.GrantedAt.IsZero() {
		t.Errorf("Inspect of a released lock: Owner %q, GrantedAt %s; want neither", st.Owner, st.GrantedAt)
	}
	// The next lease without an owner shows none.
	mustAcquire(t, svc, "orders", locks.AcquireRequest{})
	if st := mustInspect(t, svc, "orders", ""); st.Owner != "" || !st.GrantedAt.Equal(t0.Add(2*time.Second)) {
		t.Errorf("Inspect of a lease without owner: Owner %q, GrantedAt %s; want none and %s", st.Owner, st.GrantedAt, t0.Add(2*time.Second))
	}
}

func TestLeaseWithoutOwnerStoresNoOwnerField(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	mustAcquire(t, svc, "orders", locks.AcquireRequest{})
	want := []string{"f", "l", "n", "t"}
	got := lockHashFields(t, m, "orders")
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("lock hash fields = %q, want %q: an owner and the grant time cost nothing when not needed", got, want)
	}
}

func TestReentrantAcquireKeepsTheFirstOwner(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA, Owner: "first"})
	m.SetTime(t0.Add(time.Second))
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA, Owner: "second"})
	if !l.Reentrant {
		t.Fatal("second acquire with the owning token was not reentrant")
	}
	if st := mustInspect(t, svc, "orders", ""); st.Owner != "first" || !st.GrantedAt.Equal(t0) {
		t.Errorf("after a re-entry: Owner %q, GrantedAt %s; want the first grant's %q and %s", st.Owner, st.GrantedAt, "first", t0)
	}

	// A lease granted without an owner does not take one on re-entry.
	mustAcquire(t, svc, "other", locks.AcquireRequest{Token: tokenB})
	mustAcquire(t, svc, "other", locks.AcquireRequest{Token: tokenB, Owner: "late"})
	if st := mustInspect(t, svc, "other", ""); st.Owner != "" {
		t.Errorf("after a re-entry with an owner: Owner %q, want none (the first grant had none)", st.Owner)
	}
}

// TestGrantedAtWhenTheFenceIsNotTheClock covers a grant whose fence is the
// counter + 1 rather than Redis TIME (the clock went back): the grant time
// is then stored beside the fence, and GET shows the clock, not the fence.
func TestGrantedAtWhenTheFenceIsNotTheClock(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	first := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
	if _, err := svc.Release(t.Context(), "orders", first.Token); err != nil {
		t.Fatal(err)
	}
	back := t0.Add(-time.Hour)
	m.SetTime(back)
	second := mustAcquire(t, svc, "orders", locks.AcquireRequest{Owner: "after a clock step"})
	if second.Fence != first.Fence+1 {
		t.Fatalf("fence = %d, want the counter + 1 (%d)", second.Fence, first.Fence+1)
	}
	if st := mustInspect(t, svc, "orders", ""); !st.GrantedAt.Equal(back) {
		t.Errorf("GrantedAt = %s, want the Redis clock at the grant %s (not the fence's %s)",
			st.GrantedAt, back, time.UnixMicro(second.Fence).UTC())
	}
	if got := lockHashFields(t, m, "orders"); !containsField(got, "g") {
		t.Errorf("lock hash fields %q, want g: the grant time differs from the fence", got)
	}
}

func TestValidateOwner(t *testing.T) {
	good := []string{"", "a", "cron@host-1", "worker 3 of 8", strings.Repeat("x", 128), strings.Repeat("é", 128), "日本語の所有者"}
	for _, o := range good {
		if err := locks.ValidateOwner(o); err != nil {
			t.Errorf("ValidateOwner(%q) = %v, want nil", o, err)
		}
	}
	for _, b := range badOwners {
		wantValidation(t, locks.ValidateOwner(b.owner), "owner", b.rule)
	}
}

// badOwners are owner texts every acquire refuses.
var badOwners = []struct {
	desc, owner, rule string
}{
	{"129 characters", strings.Repeat("x", 129), "max"},
	{"129 two-byte characters", strings.Repeat("é", 129), "max"},
	{"a newline", "worker\nforged log line", "printable"},
	{"a tab", "worker\t1", "printable"},
	{"NUL", "worker\x00", "printable"},
	{"DEL", "worker\x7f", "printable"},
	{"an escape sequence", "\x1b[31mred", "printable"},
	{"a C1 control", "worker\u0085", "printable"},
	{"a bidi override", "worker\u202e", "printable"},
	{"a zero-width space", "wor\u200bker", "printable"},
	{"invalid UTF-8", "worker\xff", "printable"},
}

func containsField(fields []string, f string) bool {
	for _, x := range fields {
		if x == f {
			return true
		}
	}
	return false
}
