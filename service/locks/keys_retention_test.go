package locks_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// retentionConfig keeps every lock key short-lived: leases of up to a
// minute, and a fence retention of ten minutes.
var retentionConfig = locks.Config{
	MaxTTL: time.Minute, DefaultTTL: 10 * time.Second,
	MaxHoldCap: time.Minute, DefaultMaxHold: time.Minute, FenceTTL: 10 * time.Minute,
}

// keysWithoutTTL lists the keys of m that would never expire, but for the
// shared keep-alive registry (its entries are removed one by one).
func keysWithoutTTL(m *miniredis.Miniredis) []string {
	var out []string
	for _, k := range m.Keys() {
		if k != "lk:keepalive" && m.TTL(k) <= 0 {
			out = append(out, k)
		}
	}
	return out
}

// A name used once leaves nothing in Redis once the fence retention has
// passed, whatever it was used for: every key it left has a TTL right after
// its use, none longer than the retention (lost-lease reasons included: their
// default follows a retention below an hour).
func TestOneOffNamesLeaveNoKeys(t *testing.T) {
	svc, m := newTestService(t, retentionConfig, store.Config{KeyPrefix: "lk:"})
	if got := svc.Config().LostTTL; got != 10*time.Minute {
		t.Fatalf("LostTTL = %s, want the retention 10m0s (below the 1h default)", got)
	}
	uses := map[string]func(name string){
		"released": func(name string) {
			l := mustAcquire(t, svc, name, locks.AcquireRequest{})
			if _, err := svc.Release(t.Context(), name, l.Token); err != nil {
				t.Fatal(err)
			}
		},
		"expiring": func(name string) { mustAcquire(t, svc, name, locks.AcquireRequest{TTL: time.Minute}) },
		"fair with a waiter": func(name string) {
			mustAcquire(t, svc, name, locks.AcquireRequest{Fair: true})
			// The waiter gives up at once, and leaves the waiters zset and the queue.
			if _, err := svc.Acquire(t.Context(), name, locks.AcquireRequest{Fair: true, Wait: time.Millisecond}); err == nil {
				t.Fatal("a second fair acquire was granted, want it refused")
			}
		},
		"force-released keep-alive": func(name string) {
			mustAcquire(t, svc, name, locks.AcquireRequest{Keepalive: true})
			if ok, err := svc.ForceRelease(t.Context(), name); err != nil || !ok {
				t.Fatalf("ForceRelease = %v, %v", ok, err)
			}
		},
		"released keep-alive": func(name string) {
			l := mustAcquire(t, svc, name, locks.AcquireRequest{Keepalive: true})
			if _, err := svc.Renew(t.Context(), name, l.Token, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.Release(t.Context(), name, l.Token); err != nil {
				t.Fatal(err)
			}
		},
	}
	const perUse = 20
	for use, do := range uses {
		for i := range perUse {
			do(fmt.Sprintf("%s-%03d", strings.ReplaceAll(use, " ", "-"), i))
		}
	}
	keys := m.Keys()
	if len(keys) < len(uses)*perUse {
		t.Fatalf("%d keys after %d one-off names, want at least a fence counter each: %v", len(keys), len(uses)*perUse, keys)
	}
	if bad := keysWithoutTTL(m); len(bad) > 0 {
		t.Fatalf("keys without a TTL after use: %v", bad)
	}
	for _, k := range keys {
		if ttl := m.TTL(k); ttl > retentionConfig.FenceTTL {
			t.Errorf("%s: TTL %s, above the retention %s", k, ttl, retentionConfig.FenceTTL)
		}
	}
	if m.Exists("lk:keepalive") {
		members, _ := m.ZMembers("lk:keepalive")
		t.Errorf("keep-alive registry left %v after every keep-alive lease ended", members)
	}

	m.FastForward(retentionConfig.FenceTTL)
	if left := m.Keys(); len(left) > 0 {
		t.Errorf("%d keys left one retention after use, want none: %v", len(left), left)
	}
}

// The fence counter outlives every lease: grants, re-entries, renewals and
// force-releases each keep it for the retention, so a lease renewed for
// longer than the retention still has its counter when it ends.
func TestFenceCounterRetentionRefreshed(t *testing.T) {
	svc, m := newTestService(t, retentionConfig, store.Config{KeyPrefix: "lk:"})
	const counter = "lk:fence:{orders}"
	retention := retentionConfig.FenceTTL
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: time.Minute})
	if ttl := m.TTL(counter); ttl != retention {
		t.Fatalf("counter TTL after a grant = %s, want the retention %s", ttl, retention)
	}
	for i := range 15 { // 15 × 50s: longer than the retention
		m.FastForward(50 * time.Second)
		if i%2 == 0 {
			if _, err := svc.Renew(t.Context(), "orders", l.Token, 0); err != nil {
				t.Fatalf("renewal %d: %v", i, err)
			}
		} else if re := mustAcquire(t, svc, "orders", locks.AcquireRequest{Token: l.Token}); !re.Reentrant {
			t.Fatalf("re-entry %d: %+v, want reentrant", i, re)
		}
		if ttl := m.TTL(counter); ttl != retention {
			t.Fatalf("counter TTL after use %d = %s, want the retention %s, refreshed", i, ttl, retention)
		}
	}
	m.FastForward(50 * time.Second)
	if ok, err := svc.ForceRelease(t.Context(), "orders"); err != nil || !ok {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	if ttl := m.TTL(counter); ttl != retention {
		t.Errorf("counter TTL after a force-release = %s, want the retention %s, refreshed", ttl, retention)
	}
}

// A force-release bumps the fence above the evicted holder's even when the
// counter is gone (lost while the lease was held): the bump starts from the
// evicted fence, and is kept for the retention.
func TestForceReleaseBumpWithoutCounter(t *testing.T) {
	svc, m := newTestService(t, retentionConfig, store.Config{KeyPrefix: "lk:"})
	evicted := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
	m.Del("lk:fence:{orders}")
	m.SetTime(t0.Add(-time.Hour)) // the clock alone would give a smaller fence
	if ok, err := svc.ForceRelease(t.Context(), "orders"); err != nil || !ok {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	if st := mustInspect(t, svc, "orders", ""); st.Fence != evicted.Fence+1 {
		t.Errorf("last fence after force-release = %d, want %d, one above the evicted", st.Fence, evicted.Fence+1)
	}
	if ttl := m.TTL("lk:fence:{orders}"); ttl != retentionConfig.FenceTTL {
		t.Errorf("counter TTL after the bump = %s, want the retention", ttl)
	}
	if next := mustAcquire(t, svc, "orders", locks.AcquireRequest{}); next.Fence <= evicted.Fence+1 {
		t.Errorf("next fence = %d, want above the bump %d", next.Fence, evicted.Fence+1)
	}
}

// Fences stay strictly increasing across an expired counter: Redis expired
// it because its clock passed the last grant + the retention, and the next
// fence comes from that clock. Only a step back by more than the retention
// after the expiry could bring the clock below the last fence, which is the
// assumption the README states: the last case shows it is exact.
func TestFencesIncreaseAcrossAnExpiredCounter(t *testing.T) {
	retention := retentionConfig.FenceTTL
	cases := []struct {
		back time.Duration // how far Redis's clock steps back after the expiry
		safe bool
	}{
		{0, true},
		{time.Second, true},
		{retention - time.Millisecond, true},
		{retention + time.Second, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("clock back %s", c.back), func(t *testing.T) {
			svc, m := newTestService(t, retentionConfig, store.Config{KeyPrefix: "lk:"})
			var fences []int64
			for range 3 {
				l := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
				if _, err := svc.Release(t.Context(), "orders", l.Token); err != nil {
					t.Fatal(err)
				}
				fences = append(fences, l.Fence)
			}
			// The counter expires by Redis's clock, one retention after the last grant.
			m.FastForward(retention)
			m.SetTime(t0.Add(retention))
			if m.Exists("lk:fence:{orders}") {
				t.Fatal("fence counter still there one retention after the last grant")
			}
			if st := mustInspect(t, svc, "orders", ""); st.Fence != 0 {
				t.Errorf("free name after the retention reports fence %d, want 0 (nothing known)", st.Fence)
			}
			m.SetTime(t0.Add(retention - c.back))
			next := mustAcquire(t, svc, "orders", locks.AcquireRequest{}).Fence
			last := fences[len(fences)-1]
			if c.safe && next <= last {
				t.Errorf("fence after the expired counter = %d, want above every earlier fence %v", next, fences)
			}
			if !c.safe && next > last {
				t.Errorf("fence %d after a step back of more than the retention is above %d: the README's assumption is loose", next, last)
			}
			if !slices.IsSorted(fences) {
				t.Errorf("fences %v before the expiry do not increase", fences)
			}
		})
	}
}
