package locks_test

import (
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// TestSemaphoreKeepaliveStepByStep drives a keep-alive permit lease through
// the renewer, a missed heartbeat, a late one and its max_hold, on
// miniredis's clock; its permits come back when max_hold ends it.
func TestSemaphoreKeepaliveStepByStep(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	ctx := t.Context()
	now := t0
	req := semReq(3, 2, 3*time.Second)
	req.Keepalive, req.MaxHold, req.Heartbeat = true, 6*time.Second, 2*time.Second
	l := mustSem(t, svc, "pool", req)
	if l.Keepalive == nil || !l.Keepalive.Until.Equal(t0.Add(6*time.Second)) || l.Keepalive.Heartbeat != 2*time.Second {
		t.Fatalf("lease keepalive = %+v, want until t0+6s, heartbeat 2s", l.Keepalive)
	}
	if n, _ := m.ZMembers(locks.RegistryKey(locks.KeyPrefix(svc))); len(n) != 1 || n[0] != "sem/"+l.Token+":pool" {
		t.Fatalf("registry = %q, want the lease as sem/<token>:pool", n)
	}
	steps := []struct {
		desc      string
		advance   time.Duration
		heartbeat bool
		wantOwned bool
		wantTTL   time.Duration
		wantLost  string
	}{
		{"t+1s: renewed to the full ttl", time.Second, false, true, 3 * time.Second, ""},
		{"t+2.5s: heartbeat missed, not renewed", 1500 * time.Millisecond, false, true, 1500 * time.Millisecond, ""},
		{"t+2.6s: a late heartbeat renews by hand", 100 * time.Millisecond, true, true, 3 * time.Second, ""},
		{"t+3.6s: not due yet", time.Second, false, true, 2 * time.Second, ""},
		{"t+4s: renewals resume, capped at max_hold", 400 * time.Millisecond, false, true, 2 * time.Second, ""},
		{"t+6s: max_hold ends the lease", 2 * time.Second, false, false, 0, locks.LostMaxHold},
	}
	for _, st := range steps {
		advance(m, &now, st.advance)
		if st.heartbeat {
			if _, err := svc.RenewSemaphore(ctx, "pool", l.Token, 0); err != nil {
				t.Fatalf("%s: RenewSemaphore = %v", st.desc, err)
			}
		}
		locks.RenewDueNow(ctx, svc)
		got := mustSemState(t, svc, "pool", l.Token)
		if got.Owned != st.wantOwned || got.LostReason != st.wantLost {
			t.Fatalf("%s: Owned %v, LostReason %q; want %v, %q", st.desc, got.Owned, got.LostReason, st.wantOwned, st.wantLost)
		}
		if st.wantOwned && got.Lease.TTL != st.wantTTL {
			t.Errorf("%s: TTL = %s, want %s", st.desc, got.Lease.TTL, st.wantTTL)
		}
		if st.wantOwned != (got.InUse == 2) {
			t.Errorf("%s: %d permits in use, want 2 while the lease lives, else 0", st.desc, got.InUse)
		}
	}
	if n, _ := m.ZMembers(locks.RegistryKey(locks.KeyPrefix(svc))); len(n) != 0 {
		t.Errorf("registry after the lease ended = %v, want empty", n)
	}
}

// TestSemaphoreKeepaliveLostToExpiryAndForce: a keep-alive lease nobody
// renewed in time is reported expired; one force-released, force_released;
// a released one leaves the registry and is not lost.
func TestSemaphoreKeepaliveLostToExpiryAndForce(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	ctx := t.Context()
	now := t0
	req := semReq(4, 1, 3*time.Second)
	req.Keepalive = true
	a := mustSem(t, svc, "pool", req)
	b := mustSem(t, svc, "pool", req)
	c := mustSem(t, svc, "pool", req)
	if _, err := svc.ReleaseSemaphore(ctx, "pool", c.Token); err != nil {
		t.Fatal(err)
	}
	advance(m, &now, 3*time.Second) // no renewer ran: both ran out
	if st := mustSemState(t, svc, "pool", a.Token); st.Owned || st.LostReason != locks.LostExpired || st.InUse != 0 {
		t.Fatalf("state of an unrenewed lease = %+v, want lost expired, nothing in use", st)
	}
	locks.RenewDueNow(ctx, svc)
	if st := mustSemState(t, svc, "pool", c.Token); st.LostReason != "" {
		t.Errorf("released lease: lost_reason %q, want none", st.LostReason)
	}
	d := mustSem(t, svc, "pool", req)
	if _, err := svc.ForceReleaseSemaphore(ctx, "pool"); err != nil {
		t.Fatal(err)
	}
	locks.RenewDueNow(ctx, svc)
	if st := mustSemState(t, svc, "pool", d.Token); st.LostReason != locks.LostForceReleased {
		t.Errorf("force-released lease: lost_reason %q, want force_released", st.LostReason)
	}
	if st := mustSemState(t, svc, "pool", b.Token); st.LostReason != locks.LostExpired {
		t.Errorf("expired lease after the renewer: lost_reason %q, want expired", st.LostReason)
	}
	if n, _ := m.ZMembers(locks.RegistryKey(locks.KeyPrefix(svc))); len(n) != 0 {
		t.Errorf("registry = %v, want empty", n)
	}
}

// TestHoldSemaphore: a held permit lease is renewed by its hold and given
// back on Close.
func TestHoldSemaphore(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	t.Cleanup(func() { _ = svc.Close() })
	h, err := svc.HoldSemaphore(t.Context(), "pool", semReq(2, 2, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if l := h.Lease(); l.HoldCount != 2 || l.Token == "" {
		t.Fatalf("held lease = %+v, want 2 permits and a token", l)
	}
	if st := mustSemState(t, svc, "pool", ""); st.InUse != 2 {
		t.Fatalf("in use while held = %d, want 2", st.InUse)
	}
	if _, err := h.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := mustSemState(t, svc, "pool", ""); st.InUse != 0 {
		t.Errorf("in use after Close = %d, want 0", st.InUse)
	}
}
