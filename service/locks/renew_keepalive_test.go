package locks_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/locks"
)

// registryDue is when the keep-alive registry has the next renewal of the
// lease on name owned by token.
func registryDue(t *testing.T, svc *locks.Service, m *miniredis.Miniredis, name, token string) time.Time {
	t.Helper()
	due, err := m.ZScore(locks.KeyPrefix(svc)+"keepalive", token+":"+name)
	if err != nil {
		t.Fatalf("registry entry of %s: %v", name, err)
	}
	return time.UnixMilli(int64(due)).UTC()
}

// A renew with a new TTL reschedules the service's renewals of a keep-alive
// lease (every new ttl/3, never past max-hold), so a shorter TTL does not
// let the lease expire between two renewals on the old schedule.
func TestRenewWithANewTTLReschedulesKeepalive(t *testing.T) {
	tests := []struct {
		desc    string
		ttl     time.Duration // acquired with
		maxHold time.Duration
		renew   time.Duration // renewed with, at t0
		wantTTL time.Duration
		wantDue time.Duration // after t0
	}{
		{"shorter", 3 * time.Second, time.Hour, 300 * time.Millisecond, 300 * time.Millisecond, 100 * time.Millisecond},
		{"longer", 3 * time.Second, time.Hour, 9 * time.Second, 9 * time.Second, 3 * time.Second},
		{"longer than max-hold allows", 3 * time.Second, 4 * time.Second, 30 * time.Second, 4 * time.Second, 4 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			svc, m := newTestService(t, locks.Config{})
			now := t0
			l := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: tt.ttl, Keepalive: true, MaxHold: tt.maxHold})
			got, err := svc.Renew(t.Context(), "orders", l.Token, tt.renew)
			if err != nil {
				t.Fatalf("Renew = %v", err)
			}
			if got.TTL != tt.wantTTL {
				t.Errorf("renewed TTL = %s, want %s", got.TTL, tt.wantTTL)
			}
			if due := registryDue(t, svc, m, "orders", l.Token); !due.Equal(t0.Add(tt.wantDue)) {
				t.Errorf("next renewal due at t0+%s, want t0+%s", due.Sub(t0), tt.wantDue)
			}
			// Five times the new TTL later, the renewer has kept the lease.
			step := min(tt.wantTTL/3, 100*time.Millisecond)
			for elapsed := time.Duration(0); elapsed < 5*tt.wantTTL && elapsed < tt.maxHold-step; elapsed += step {
				advance(m, &now, step)
				locks.RenewDueNow(t.Context(), svc)
				if st := mustInspect(t, svc, "orders", l.Token); !st.Owned {
					t.Fatalf("t0+%s: lease lost (%q) after a renew with ttl %s", now.Sub(t0), st.LostReason, tt.renew)
				}
			}
		})
	}
}

// A renew without a ttl is a heartbeat at the lease's own TTL: it leaves
// the renewer's schedule as it was.
func TestRenewWithoutTTLKeepsTheSchedule(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	now := t0
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true, MaxHold: time.Hour})
	advance(m, &now, 500*time.Millisecond)
	for _, ttl := range []time.Duration{0, 3 * time.Second} {
		if _, err := svc.Renew(t.Context(), "orders", l.Token, ttl); err != nil {
			t.Fatalf("Renew(%s) = %v", ttl, err)
		}
		if due := registryDue(t, svc, m, "orders", l.Token); !due.Equal(t0.Add(time.Second)) {
			t.Errorf("after Renew(%s): next renewal due at t0+%s, want t0+1s as before", ttl, due.Sub(t0))
		}
	}
}

// Renewing a keep-alive lease answers its keep-alive bounds, as acquiring
// it does; renewing a plain lease answers none.
func TestRenewReportsKeepalive(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	now := t0
	ka := mustAcquire(t, svc, "kept", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true,
		MaxHold: time.Minute, Heartbeat: 2 * time.Second})
	plain := mustAcquire(t, svc, "plain", locks.AcquireRequest{TTL: 3 * time.Second})
	advance(m, &now, 500*time.Millisecond)

	got, err := svc.Renew(t.Context(), "kept", ka.Token, 0)
	if err != nil {
		t.Fatalf("Renew = %v", err)
	}
	want := &locks.Keepalive{Until: t0.Add(time.Minute), Heartbeat: 2 * time.Second, HeartbeatDue: now.Add(2 * time.Second)}
	if diff := cmp.Diff(want, got.Keepalive); diff != "" {
		t.Errorf("renewed keep-alive lease: Keepalive mismatch (-want +got):\n%s", diff)
	}
	if st := mustInspect(t, svc, "kept", ka.Token); !cmp.Equal(st.Keepalive, got.Keepalive) {
		t.Errorf("renew answered Keepalive %+v, inspect %+v", got.Keepalive, st.Keepalive)
	}

	got, err = svc.Renew(t.Context(), "plain", plain.Token, 0)
	if err != nil {
		t.Fatalf("Renew = %v", err)
	}
	if got.Keepalive != nil {
		t.Errorf("renewed plain lease: Keepalive = %+v, want nil", got.Keepalive)
	}
}
