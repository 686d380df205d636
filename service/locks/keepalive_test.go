package locks_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

func TestAcquireKeepaliveValidation(t *testing.T) {
	tests := []struct {
		desc        string
		req         locks.AcquireRequest
		field, rule string
	}{
		{"max_hold without keepalive", locks.AcquireRequest{MaxHold: time.Minute}, "max_hold", "keepalive"},
		{"heartbeat without keepalive", locks.AcquireRequest{Heartbeat: time.Second}, "heartbeat", "keepalive"},
		{"max_hold above the cap", locks.AcquireRequest{Keepalive: true, MaxHold: 2 * time.Hour}, "max_hold", "max"},
		{"max_hold below the min ttl", locks.AcquireRequest{Keepalive: true, MaxHold: time.Microsecond}, "max_hold", "min"},
		{"negative heartbeat", locks.AcquireRequest{Keepalive: true, Heartbeat: -time.Second}, "heartbeat", "min"},
		{"heartbeat above the cap", locks.AcquireRequest{Keepalive: true, Heartbeat: 2 * time.Hour}, "heartbeat", "max"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			svc, m := newTestService(t, locks.Config{MaxHoldCap: time.Hour})
			_, err := svc.Acquire(t.Context(), "orders", tt.req)
			wantValidation(t, err, tt.field, tt.rule)
			if keys := m.Keys(); len(keys) != 0 {
				t.Errorf("keys after a refused acquire = %v, want none", keys)
			}
		})
	}
}

// advance moves the miniredis clock (TIME) and its TTLs forward together.
func advance(m *miniredis.Miniredis, now *time.Time, d time.Duration) {
	*now = now.Add(d)
	m.SetTime(*now)
	m.FastForward(d)
}

func TestKeepaliveBoundsStepByStep(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	ctx := t.Context()
	now := t0
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true,
		MaxHold: 6 * time.Second, Heartbeat: 2 * time.Second})
	if l.Keepalive == nil || !l.Keepalive.Until.Equal(t0.Add(6*time.Second)) || l.Keepalive.Heartbeat != 2*time.Second {
		t.Fatalf("lease keepalive = %+v, want until t0+6s, heartbeat 2s", l.Keepalive)
	}
	steps := []struct {
		desc      string
		advance   time.Duration
		heartbeat bool
		wantOwned bool
		wantTTL   time.Duration // remaining TTL after the renewer ran (when owned)
		wantLost  string        // lost reason seen by the owner (when not owned)
	}{
		{"t+1s: renewed to the full ttl", time.Second, false, true, 3 * time.Second, ""},
		{"t+2.5s: heartbeat missed, not renewed", 1500 * time.Millisecond, false, true, 1500 * time.Millisecond, ""},
		{"t+2.6s: a late heartbeat renews by hand", 100 * time.Millisecond, true, true, 3 * time.Second, ""},
		{"t+3.6s: not due yet (due when the unrenewed TTL would have ended)", time.Second, false, true, 2 * time.Second, ""},
		{"t+4s: renewals resume, capped at max_hold", 400 * time.Millisecond, false, true, 2 * time.Second, ""},
		{"t+6s: max_hold ends the lease", 2 * time.Second, false, false, 0, locks.LostMaxHold},
	}
	for _, st := range steps {
		advance(m, &now, st.advance)
		if st.heartbeat {
			if _, err := svc.Renew(ctx, "orders", l.Token, 0); err != nil {
				t.Fatalf("%s: Renew = %v", st.desc, err)
			}
		}
		locks.RenewDueNow(ctx, svc)
		got := mustInspect(t, svc, "orders", l.Token)
		if got.Owned != st.wantOwned || got.LostReason != st.wantLost {
			t.Fatalf("%s: Owned %v, LostReason %q; want %v, %q", st.desc, got.Owned, got.LostReason, st.wantOwned, st.wantLost)
		}
		if st.wantOwned && got.TTL != st.wantTTL {
			t.Errorf("%s: TTL = %s, want %s", st.desc, got.TTL, st.wantTTL)
		}
	}
	if n, _ := m.ZMembers(locks.KeyPrefix(svc) + "keepalive"); len(n) != 0 {
		t.Errorf("registry after the lease ended = %v, want empty", n)
	}
}

// A renewal hands the stored TTL back to Redis as its own string. One that
// is not plain digits (Latchkey never writes such a value, Redis would refuse
// it in PEXPIRE) is passed as a number instead, so the lease is renewed and
// the rest of the batch is not failed with it.
func TestRenewalOverAStoredTTLThatIsNotDigits(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	now := t0
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true, MaxHold: time.Hour})
	other := mustAcquire(t, svc, "invoices", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true, MaxHold: time.Hour})
	lockKey := locks.KeyPrefix(svc) + "lock:{orders}"
	if m.HGet(lockKey, "t") != l.Token {
		t.Fatalf("no lock hash %s holding the lease (keys %v)", lockKey, m.Keys())
	}
	m.HSet(lockKey, "l", "3000.0")
	advance(m, &now, 1500*time.Millisecond)
	locks.RenewDueNow(t.Context(), svc)
	for _, lease := range []locks.Lease{l, other} {
		got := mustInspect(t, svc, lease.Name, lease.Token)
		if !got.Owned || got.TTL != 3*time.Second {
			t.Errorf("%s after the renewal: Owned %v, TTL %s; want true, 3s", lease.Name, got.Owned, got.TTL)
		}
	}
}

func TestReleaseAndForceReleaseLeaveNoRegistryEntry(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	ctx := t.Context()
	a := mustAcquire(t, svc, "a", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true})
	b := mustAcquire(t, svc, "b", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true})
	if _, err := svc.Release(ctx, "a", a.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ForceRelease(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if n, _ := m.ZMembers(locks.KeyPrefix(svc) + "keepalive"); len(n) != 0 {
		t.Errorf("registry = %v, want empty", n)
	}
	if got := mustInspect(t, svc, "a", a.Token).LostReason; got != "" {
		t.Errorf("released lease: LostReason %q, want none", got)
	}
	if got := mustInspect(t, svc, "b", b.Token).LostReason; got != locks.LostForceReleased {
		t.Errorf("force-released lease: LostReason %q, want %q", got, locks.LostForceReleased)
	}
}

func TestMalformedRegistryEntriesDoNotCrowdOutLeases(t *testing.T) {
	svc, m := newTestService(t, locks.Config{RenewBatch: 10})
	ctx := t.Context()
	now := t0
	registry := locks.KeyPrefix(svc) + "keepalive"
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true})
	for i := range 25 { // due before the lease, more than two batches of them
		if _, err := m.ZAdd(registry, 0, fmt.Sprintf("junk-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	advance(m, &now, 1500*time.Millisecond)
	for range 5 { // the renewer loops at once after dropping entries
		locks.RenewDueNow(ctx, svc)
	}
	if got := mustInspect(t, svc, "orders", l.Token); got.TTL != 3*time.Second {
		t.Errorf("lease TTL after the renewer ran = %s, want renewed to 3s", got.TTL)
	}
	members, _ := m.ZMembers(registry)
	if want := []string{l.Token + ":orders"}; !slices.Equal(members, want) {
		t.Errorf("registry = %v, want %v", members, want)
	}
}

// TestHeartbeatMinimumIsTheRenewerPoll: a heartbeat shorter than the
// renewer's poll is refused naming the bound, which follows the configured
// poll; a heartbeat of one poll is granted.
func TestHeartbeatMinimumIsTheRenewerPoll(t *testing.T) {
	for _, poll := range []time.Duration{0, 20 * time.Millisecond} {
		cfg := locks.Config{RenewPoll: poll}
		bound := locks.DefaultConfig().RenewPoll
		if poll != 0 {
			bound = poll
		}
		t.Run(bound.String(), func(t *testing.T) {
			svc, m := newTestService(t, cfg)
			for _, hb := range []time.Duration{time.Millisecond, bound - time.Millisecond} {
				_, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{Keepalive: true, Heartbeat: hb})
				wantValidation(t, err, "heartbeat", "min")
				var ve *store.ValidationError
				if want := fmt.Sprintf("heartbeat must be at least %s, the renewer's poll interval: it cannot see heartbeats closer together; got %s", bound, hb); errors.As(err, &ve) && ve.Detail != want {
					t.Errorf("detail = %q, want %q", ve.Detail, want)
				}
				if keys := m.Keys(); len(keys) != 0 {
					t.Errorf("keys after a refused acquire = %v, want none", keys)
				}
			}
			if _, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{Keepalive: true, Heartbeat: bound}); err != nil {
				t.Errorf("heartbeat of one poll (%s): %v, want granted", bound, err)
			}
		})
	}
}
