package locks_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

const (
	tokenA = "token-a-0123456789abcdef"
	tokenB = "token-b-0123456789abcdef"
)

func mustAcquire(t *testing.T, svc *locks.Service, name string, req locks.AcquireRequest) locks.Lease {
	t.Helper()
	l, err := svc.Acquire(t.Context(), name, req)
	if err != nil {
		t.Fatalf("Acquire(%q) = %v", name, err)
	}
	return l
}

func mustInspect(t *testing.T, svc *locks.Service, name, token string) locks.LockState {
	t.Helper()
	st, err := svc.Inspect(t.Context(), name, token)
	if err != nil {
		t.Fatalf("Inspect(%q) = %v", name, err)
	}
	return st
}

func TestAcquireNew(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	got := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: 10 * time.Second})
	if err := locks.ValidateToken(got.Token); err != nil || len(got.Token) != 22 {
		t.Errorf("generated token %q (%d chars, %v), want 22 base64url characters", got.Token, len(got.Token), err)
	}
	if got.Fence < t0.UnixMicro() {
		t.Errorf("fence = %d, want at least Redis TIME in µs (%d)", got.Fence, t0.UnixMicro())
	}
	want := locks.Lease{Name: "orders", Token: got.Token, Fence: got.Fence, HoldCount: 1,
		TTL: 10 * time.Second, ExpiresAt: t0.Add(10 * time.Second), Reentrant: false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Acquire mismatch (-want +got):\n%s", diff)
	}
}

func TestAcquireDefaultTTL(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{DefaultTTL: 45 * time.Second})
	got := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
	if got.TTL != 45*time.Second {
		t.Errorf("TTL = %s, want the configured default 45s", got.TTL)
	}
}

func TestAcquireClientChosenToken(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	got := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA})
	if got.Token != tokenA || got.Reentrant {
		t.Fatalf("Acquire with a client token = {Token: %q, Reentrant: %v}, want {%q, false}", got.Token, got.Reentrant, tokenA)
	}
	if st := mustInspect(t, svc, "orders", tokenA); !st.Owned {
		t.Error("Inspect with the client's token: Owned = false, want true")
	}
}

func TestAcquireReentrant(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	first := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: 10 * time.Second})
	m.FastForward(4 * time.Second)
	m.SetTime(t0.Add(4 * time.Second))
	if st := mustInspect(t, svc, "orders", ""); st.TTL != 6*time.Second {
		t.Fatalf("TTL after 4s = %s, want 6s", st.TTL)
	}

	got := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: first.Token, TTL: 20 * time.Second})
	want := locks.Lease{Name: "orders", Token: first.Token, Fence: first.Fence, HoldCount: 2,
		TTL: 20 * time.Second, ExpiresAt: t0.Add(24 * time.Second), Reentrant: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reentrant Acquire mismatch (-want +got):\n%s", diff)
	}
	st := mustInspect(t, svc, "orders", "")
	if st.HoldCount != 2 || st.TTL != 20*time.Second || st.Fence != first.Fence {
		t.Errorf("Inspect = {HoldCount: %d, TTL: %s, Fence: %d}, want {2, 20s, %d}", st.HoldCount, st.TTL, st.Fence, first.Fence)
	}
}

// A re-entry without a ttl refreshes the lease to its own TTL, not to the
// server default: a lease taken for an hour stays an hour's lease.
func TestAcquireReentrantKeepsItsOwnTTL(t *testing.T) {
	svc, m := newTestService(t, locks.Config{DefaultTTL: 30 * time.Second})
	first := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: time.Hour})
	m.FastForward(10 * time.Minute)
	got := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: first.Token})
	if got.TTL != time.Hour || got.HoldCount != 2 {
		t.Errorf("re-entry without ttl: TTL %s, hold count %d; want 1h0m0s, 2", got.TTL, got.HoldCount)
	}
	got = mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: first.Token, TTL: 5 * time.Second})
	if got.TTL != 5*time.Second {
		t.Errorf("re-entry with ttl 5s: TTL %s, want 5s", got.TTL)
	}
	got = mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: first.Token})
	if got.TTL != 5*time.Second {
		t.Errorf("re-entry without ttl after one with 5s: TTL %s, want the lease's 5s", got.TTL)
	}
}

// The scripts hand a stored TTL back to Redis as its own string. One that is
// not plain digits (Latchkey never writes such a value, Redis would refuse it
// in PEXPIRE) must not reach a
// PEXPIRE: a re-entry without ttl then falls back to the default TTL.
func TestAcquireReentrantIgnoresAStoredTTLThatIsNotDigits(t *testing.T) {
	svc, m := newTestService(t, locks.Config{DefaultTTL: 30 * time.Second})
	first := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: time.Hour})
	var lockKey string
	for _, k := range m.Keys() {
		if typ := m.Type(k); typ == "hash" && m.HGet(k, "t") == first.Token {
			lockKey = k
		}
	}
	if lockKey == "" {
		t.Fatalf("no lock hash holding the token among %v", m.Keys())
	}
	m.HSet(lockKey, "l", "12000.0")
	got := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: first.Token})
	if got.TTL != 30*time.Second || got.HoldCount != 2 {
		t.Errorf("re-entry over a stored ttl of %q: TTL %s, hold count %d; want the default 30s, 2", "12000.0", got.TTL, got.HoldCount)
	}
	if ttl := m.TTL(lockKey); ttl != 30*time.Second {
		t.Errorf("lock key TTL %s after the re-entry, want 30s", ttl)
	}
}

func TestAcquireHeldByAnother(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	holder := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA, TTL: 10 * time.Second})
	m.FastForward(3 * time.Second)

	for _, token := range []string{"", tokenB} {
		got, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{Token: token, TTL: time.Minute})
		var held *locks.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("Acquire(token %q) error = %v, want *locks.HeldError", token, err)
		}
		if diff := cmp.Diff(locks.HeldError{Name: "orders", RetryAfter: 7 * time.Second}, *held); diff != "" {
			t.Errorf("HeldError mismatch (-want +got):\n%s", diff)
		}
		if !errors.Is(err, store.ErrConflict) {
			t.Error("HeldError does not wrap ErrConflict")
		}
		if got != (locks.Lease{}) {
			t.Errorf("Acquire returned lease %+v with the error, want the zero Lease", got)
		}
	}
	st := mustInspect(t, svc, "orders", tokenA)
	if !st.Owned || st.HoldCount != 1 || st.Fence != holder.Fence {
		t.Errorf("holder's lease changed by refused acquires: %+v", st)
	}
}

func TestRelease(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: l.Token, TTL: 5 * time.Second})

	steps := []struct {
		want     locks.Released
		wantHeld bool
	}{
		{locks.Released{Released: false, HoldCount: 1}, true},
		{locks.Released{Released: true, HoldCount: 0}, false},
	}
	for i, step := range steps {
		got, err := svc.Release(t.Context(), "orders", l.Token)
		if err != nil {
			t.Fatalf("release %d: %v", i+1, err)
		}
		if got != step.want {
			t.Errorf("release %d = %+v, want %+v", i+1, got, step.want)
		}
		if st := mustInspect(t, svc, "orders", ""); st.Held != step.wantHeld {
			t.Errorf("after release %d: Held = %v, want %v", i+1, st.Held, step.wantHeld)
		}
	}
	if _, err := svc.Release(t.Context(), "orders", l.Token); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("release of a freed lock = %v, want ErrNotFound", err)
	}
	// The lock is free again: anyone may take it.
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenB})
}

func TestReleaseNotOwner(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA})
	_, err := svc.Release(t.Context(), "orders", tokenB)
	if !errors.Is(err, locks.ErrNotOwner) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Release by another token = %v, want ErrNotOwner (ErrConflict)", err)
	}
	if st := mustInspect(t, svc, "orders", tokenA); !st.Owned || st.HoldCount != 1 {
		t.Errorf("lease after a refused release = %+v, want still owned with 1 hold", st)
	}
}

func TestReleaseNotFound(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	if _, err := svc.Release(t.Context(), "never-taken", tokenA); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Release of a lock never taken = %v, want ErrNotFound", err)
	}
}

func TestReleaseExpired(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA, TTL: time.Second})
	m.FastForward(time.Second)
	if _, err := svc.Release(t.Context(), "orders", tokenA); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Release of an expired lease = %v, want ErrNotFound", err)
	}
}

func TestRenew(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA, TTL: 10 * time.Second})
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA, TTL: 10 * time.Second})

	steps := []struct {
		desc    string
		ttl     time.Duration
		wantTTL time.Duration
	}{
		{"default is the lease's own ttl", 0, 10 * time.Second},
		{"explicit ttl", 30 * time.Second, 30 * time.Second},
		{"default after an explicit ttl is the new ttl", 0, 30 * time.Second},
	}
	now := t0
	for _, step := range steps {
		m.FastForward(8 * time.Second)
		now = now.Add(8 * time.Second)
		m.SetTime(now)
		got, err := svc.Renew(t.Context(), "orders", tokenA, step.ttl)
		if err != nil {
			t.Fatalf("%s: Renew = %v", step.desc, err)
		}
		want := locks.Lease{Name: "orders", Token: tokenA, Fence: l.Fence, HoldCount: 2,
			TTL: step.wantTTL, ExpiresAt: now.Add(step.wantTTL)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: Renew mismatch (-want +got):\n%s", step.desc, diff)
		}
		if st := mustInspect(t, svc, "orders", ""); st.TTL != step.wantTTL {
			t.Errorf("%s: remaining TTL = %s, want %s", step.desc, st.TTL, step.wantTTL)
		}
	}
}

func TestRenewNotOwner(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA, TTL: 10 * time.Second})
	_, err := svc.Renew(t.Context(), "orders", tokenB, time.Hour)
	if !errors.Is(err, locks.ErrNotOwner) {
		t.Fatalf("Renew by another token = %v, want ErrNotOwner", err)
	}
	if st := mustInspect(t, svc, "orders", ""); st.TTL != 10*time.Second {
		t.Errorf("TTL after a refused renew = %s, want 10s unchanged", st.TTL)
	}
}

func TestRenewNotFound(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	if _, err := svc.Renew(t.Context(), "never-taken", tokenA, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Renew of a lock never taken = %v, want ErrNotFound", err)
	}
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA, TTL: time.Second})
	m.FastForward(time.Second)
	if _, err := svc.Renew(t.Context(), "orders", tokenA, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Renew of an expired lease = %v, want ErrNotFound", err)
	}
	if st := mustInspect(t, svc, "orders", ""); st.Held {
		t.Error("Renew of an expired lease brought it back")
	}
}

func TestForceRelease(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	evicted := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA})
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA})

	removed, err := svc.ForceRelease(t.Context(), "orders")
	if err != nil || !removed {
		t.Fatalf("ForceRelease = %v, %v; want true, nil", removed, err)
	}
	st := mustInspect(t, svc, "orders", tokenA)
	if st.Held || st.Owned {
		t.Fatalf("after ForceRelease: %+v, want free", st)
	}
	if st.Fence <= evicted.Fence {
		t.Errorf("last fence after ForceRelease = %d, want it bumped above the evicted %d", st.Fence, evicted.Fence)
	}
	if _, err := svc.Release(t.Context(), "orders", tokenA); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("evicted holder's Release = %v, want ErrNotFound", err)
	}
	next := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenB})
	if next.Fence <= st.Fence {
		t.Errorf("next grant's fence = %d, want above %d (the bumped fence)", next.Fence, st.Fence)
	}
}

func TestForceReleaseFreeLockIsIdempotent(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	removed, err := svc.ForceRelease(t.Context(), "never-taken")
	if err != nil || removed {
		t.Fatalf("ForceRelease of a never-taken lock = %v, %v; want false, nil", removed, err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("ForceRelease of a free lock wrote keys %q", keys)
	}

	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
	if _, err := svc.Release(t.Context(), "orders", l.Token); err != nil {
		t.Fatal(err)
	}
	before := mustInspect(t, svc, "orders", "")
	for i := range 2 {
		removed, err := svc.ForceRelease(t.Context(), "orders")
		if err != nil || removed {
			t.Fatalf("ForceRelease #%d of a free lock = %v, %v; want false, nil", i+1, removed, err)
		}
	}
	if after := mustInspect(t, svc, "orders", ""); after != before {
		t.Errorf("ForceRelease of a free lock changed it: %+v, want %+v", after, before)
	}
}

func TestInspect(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	if got, want := mustInspect(t, svc, "orders", ""), (locks.LockState{Name: "orders", At: t0}); got != want {
		t.Errorf("Inspect of a never-taken lock = %+v, want %+v", got, want)
	}

	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: tokenA, TTL: 10 * time.Second})
	m.FastForward(2 * time.Second)
	m.SetTime(t0.Add(2 * time.Second))
	held := locks.LockState{Name: "orders", Held: true, HoldCount: 1, TTL: 8 * time.Second,
		ExpiresAt: t0.Add(10 * time.Second), Fence: l.Fence, GrantedAt: t0, At: t0.Add(2 * time.Second)}
	tests := []struct {
		desc, token string
		owned       bool
	}{
		{"without token", "", false},
		{"with the owner's token", tokenA, true},
		{"with another token", tokenB, false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got := mustInspect(t, svc, "orders", tt.token)
			want := held
			want.Owned = tt.owned
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Inspect mismatch (-want +got):\n%s", diff)
			}
			if s := fmt.Sprintf("%#v", got); strings.Contains(s, tokenA) {
				t.Errorf("Inspect reveals the owner's token: %s", s)
			}
		})
	}

	if _, err := svc.Release(t.Context(), "orders", tokenA); err != nil {
		t.Fatal(err)
	}
	if got, want := mustInspect(t, svc, "orders", tokenA), (locks.LockState{Name: "orders", Fence: l.Fence, At: t0.Add(2 * time.Second)}); got != want {
		t.Errorf("Inspect of a released lock = %+v, want %+v (last fence kept)", got, want)
	}
}

func TestFencesStrictlyIncrease(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	var last int64
	grant := func(desc string) {
		t.Helper()
		l := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
		if l.Fence <= last {
			t.Fatalf("%s: fence = %d, want above the previous %d", desc, l.Fence, last)
		}
		last = l.Fence
		if _, err := svc.Release(t.Context(), "orders", l.Token); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		grant(fmt.Sprintf("grant %d", i+1))
	}
	// The clock stood still: the first fence was the clock, then each was
	// one more than the last.
	if first := last - 4; first < t0.UnixMicro() {
		t.Errorf("first fence = %d, want it from Redis TIME in µs (at least %d), not from 0", first, t0.UnixMicro())
	}

	// The counter is lost (a FLUSHALL, or a restart without persistence);
	// Redis's clock moved on by a millisecond meanwhile.
	m.FlushAll()
	m.SetTime(t0.Add(time.Millisecond))
	grant("first grant after the counter was lost")
	grant("second grant after the counter was lost")

	// Other names have their own counters, seeded the same way.
	if l := mustAcquire(t, svc, "other", locks.AcquireRequest{}); l.Fence <= t0.UnixMicro() {
		t.Errorf("fence of another name = %d, want seeded above %d", l.Fence, t0.UnixMicro())
	}
}

func TestFenceCounterOutlivesTheLock(t *testing.T) {
	svc, m := newTestService(t, locks.Config{MaxTTL: time.Hour, MaxHoldCap: time.Hour, FenceTTL: 2 * time.Hour})
	first := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: time.Hour})
	// The lease expires, the counter does not: the next fence continues from it.
	m.FastForward(90 * time.Minute)
	m.SetTime(t0.Add(-time.Hour)) // a clock that went backwards must not matter while the counter lives
	second := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
	if second.Fence != first.Fence+1 {
		t.Errorf("fence after expiry = %d, want %d (the counter continued)", second.Fence, first.Fence+1)
	}
}

// TestInvalidInputChangesNothing proves that every operation refuses bad
// input with a *ValidationError naming the field and rule, without sending
// a single command to Redis.
func TestInvalidInputChangesNothing(t *testing.T) {
	svc, m := newTestService(t, locks.Config{MinTTL: 10 * time.Millisecond, MaxTTL: time.Hour})
	type op struct {
		desc        string
		call        func() error
		field, rule string
	}
	acquire := func(name string, req locks.AcquireRequest) func() error {
		return func() error { _, err := svc.Acquire(t.Context(), name, req); return err }
	}
	renew := func(name, token string, ttl time.Duration) func() error {
		return func() error { _, err := svc.Renew(t.Context(), name, token, ttl); return err }
	}
	release := func(name, token string) func() error {
		return func() error { _, err := svc.Release(t.Context(), name, token); return err }
	}
	force := func(name string) func() error {
		return func() error { _, err := svc.ForceRelease(t.Context(), name); return err }
	}
	inspect := func(name, token string) func() error {
		return func() error { _, err := svc.Inspect(t.Context(), name, token); return err }
	}

	var ops []op
	for _, n := range badNames {
		ops = append(ops,
			op{"acquire name " + n.desc, acquire(n.name, locks.AcquireRequest{}), "name", "format"},
			op{"renew name " + n.desc, renew(n.name, tokenA, 0), "name", "format"},
			op{"release name " + n.desc, release(n.name, tokenA), "name", "format"},
			op{"force-release name " + n.desc, force(n.name), "name", "format"},
			op{"inspect name " + n.desc, inspect(n.name, ""), "name", "format"},
		)
	}
	for _, tk := range badTokens {
		ops = append(ops,
			op{"acquire token " + tk.desc, acquire("orders", locks.AcquireRequest{Token: tk.token}), "Lock-Token", "format"},
			op{"renew token " + tk.desc, renew("orders", tk.token, 0), "Lock-Token", "format"},
			op{"release token " + tk.desc, release("orders", tk.token), "Lock-Token", "format"},
			op{"inspect token " + tk.desc, inspect("orders", tk.token), "Lock-Token", "format"},
		)
	}
	for _, b := range badOwners {
		ops = append(ops, op{"acquire owner " + b.desc, acquire("orders", locks.AcquireRequest{Owner: b.owner}), "owner", b.rule})
	}
	ops = append(ops,
		op{"renew without token", renew("orders", "", 0), "Lock-Token", "format"},
		op{"release without token", release("orders", ""), "Lock-Token", "format"},
		op{"acquire ttl below min", acquire("orders", locks.AcquireRequest{TTL: 5 * time.Millisecond}), "ttl", "min"},
		op{"acquire negative ttl", acquire("orders", locks.AcquireRequest{TTL: -time.Second}), "ttl", "min"},
		op{"acquire ttl above max", acquire("orders", locks.AcquireRequest{TTL: time.Hour + time.Millisecond}), "ttl", "max"},
		op{"renew ttl below min", renew("orders", tokenA, 5*time.Millisecond), "ttl", "min"},
		op{"renew negative ttl", renew("orders", tokenA, -time.Second), "ttl", "min"},
		op{"renew ttl above max", renew("orders", tokenA, 2*time.Hour), "ttl", "max"},
	)

	before := m.CommandCount()
	for _, o := range ops {
		t.Run(o.desc, func(t *testing.T) {
			wantValidation(t, o.call(), o.field, o.rule)
		})
	}
	if got := m.CommandCount(); got != before {
		t.Errorf("invalid requests sent %d commands to Redis, want 0", got-before)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("invalid requests wrote keys %q, want none", keys)
	}
}

func TestValidBoundsAreAccepted(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{MinTTL: 10 * time.Millisecond, MaxTTL: time.Hour})
	for _, n := range goodNames {
		for _, ttl := range []time.Duration{10 * time.Millisecond, time.Hour} {
			l, err := svc.Acquire(t.Context(), n.name, locks.AcquireRequest{TTL: ttl})
			if err != nil {
				t.Fatalf("Acquire(%s, ttl %s) = %v, want a lease", n.desc, ttl, err)
			}
			if _, err := svc.Release(t.Context(), n.name, l.Token); err != nil {
				t.Fatalf("Release(%s) = %v", n.desc, err)
			}
		}
	}
	long := strings.Repeat("t", 128)
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: long})
	if l.Token != long {
		t.Errorf("Token = %q, want the 128-character client token kept", l.Token)
	}
}

// TestWakeUps checks that only a lock becoming free publishes a wake-up for
// its waiters, on a channel in the lock's hash slot: the last release and a
// force-release of a held lock do; a partial release, a refused release and
// a force-release of a free lock do not. Every grant, new or a re-entry,
// publishes its notice on the same channel: the lease's fence and TTL.
func TestWakeUps(t *testing.T) {
	_, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, locks.Config{})
	sub := subscribeAll(t, rdb)

	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
	mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: l.Token, TTL: 5 * time.Second})
	if _, err := svc.Release(t.Context(), "orders", tokenB); !errors.Is(err, locks.ErrNotOwner) {
		t.Fatalf("release by another token = %v", err)
	}
	for range 2 { // partial, then final
		if _, err := svc.Release(t.Context(), "orders", l.Token); err != nil {
			t.Fatal(err)
		}
	}
	next := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
	for range 2 { // a held lock, then a free one
		if _, err := svc.ForceRelease(t.Context(), "orders"); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Publish(t.Context(), "end-of-test", "end").Err(); err != nil {
		t.Fatal(err)
	}

	var got []string
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		msg, err := sub.ReceiveMessage(ctx)
		cancel()
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		if msg.Channel == "end-of-test" {
			break
		}
		if !strings.Contains(msg.Channel, "{orders}") {
			t.Errorf("wake-up on channel %q, want it in the lock's hash slot {orders}", msg.Channel)
		}
		got = append(got, msg.Payload)
	}
	want := []string{
		fmt.Sprintf("acquired:%d:30000", l.Fence), // the grant, with the default TTL
		fmt.Sprintf("acquired:%d:5000", l.Fence),  // the re-entry, with its own
		"released",
		fmt.Sprintf("acquired:%d:30000", next.Fence),
		"forced",
	}
	if !slices.Equal(got, want) {
		t.Errorf("messages = %q, want %q (grant, re-entry, final release, grant, force-release)", got, want)
	}
}
