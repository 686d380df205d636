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

// retentionAfterLongest is how long a key of a lock name may outlive its
// use under retentionConfig: the longest lease (a TTL or a max hold), then
// the fence retention.
var retentionAfterLongest = max(retentionConfig.MaxTTL, retentionConfig.MaxHoldCap) + retentionConfig.FenceTTL

// A name used once leaves nothing in Redis once its longest possible lease
// and the fence retention have passed, whatever it was used for: every key
// it left has a TTL right after its use, none longer than that (lost-lease
// reasons included: their default follows a retention below an hour).
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
		"released read lease": func(name string) {
			l := mustAcquireRW(t, svc, name, locks.AcquireRequest{Mode: locks.ModeRead, TTL: time.Minute})
			if _, err := svc.ReleaseRW(t.Context(), name, l.Token, locks.ModeRead); err != nil {
				t.Fatal(err)
			}
		},
		"expiring write lease": func(name string) {
			mustAcquireRW(t, svc, name, locks.AcquireRequest{Mode: locks.ModeWrite, TTL: time.Minute})
		},
		"released semaphore lease": func(name string) {
			l := mustSem(t, svc, name, semReq(3, 1, time.Minute))
			if _, err := svc.ReleaseSemaphore(t.Context(), name, l.Token); err != nil {
				t.Fatal(err)
			}
		},
		"expiring semaphore lease": func(name string) { mustSem(t, svc, name, semReq(3, 2, time.Minute)) },
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
		if ttl := m.TTL(k); ttl > retentionAfterLongest {
			t.Errorf("%s: TTL %s, above the longest lease and the retention %s", k, ttl, retentionAfterLongest)
		}
	}
	if m.Exists("lk:keepalive") {
		members, _ := m.ZMembers("lk:keepalive")
		t.Errorf("keep-alive registry left %v after every keep-alive lease ended", members)
	}

	m.FastForward(retentionAfterLongest)
	if left := m.Keys(); len(left) > 0 {
		t.Errorf("%d keys left the longest lease and one retention after use, want none: %v", len(left), left)
	}
}

// retentionCase is one lock primitive as the fence retention sees it: how
// to grant a lease of a TTL (a keep-alive one up to a max hold when
// maxHold > 0), how to release it, and the key that holds the name's last
// fence.
type retentionCase struct {
	grant   func(t *testing.T, svc *locks.Service, name string, ttl, maxHold time.Duration) (token string)
	release func(t *testing.T, svc *locks.Service, name, token string)
	counter func(name string) string
	shared  bool // leases of several tokens at once
}

var retentionCases = map[string]retentionCase{
	"lock": {
		grant: func(t *testing.T, svc *locks.Service, name string, ttl, maxHold time.Duration) string {
			return mustAcquire(t, svc, name, locks.AcquireRequest{TTL: ttl, Keepalive: maxHold > 0, MaxHold: maxHold}).Token
		},
		release: func(t *testing.T, svc *locks.Service, name, token string) {
			if _, err := svc.Release(t.Context(), name, token); err != nil {
				t.Fatal(err)
			}
		},
		counter: func(name string) string { return "lk:fence:{" + name + "}" },
	},
	"read lease": {
		grant: func(t *testing.T, svc *locks.Service, name string, ttl, maxHold time.Duration) string {
			return mustAcquireRW(t, svc, name, locks.AcquireRequest{Mode: locks.ModeRead, TTL: ttl, Keepalive: maxHold > 0, MaxHold: maxHold}).Token
		},
		release: func(t *testing.T, svc *locks.Service, name, token string) {
			if _, err := svc.ReleaseRW(t.Context(), name, token, locks.ModeRead); err != nil {
				t.Fatal(err)
			}
		},
		counter: func(name string) string { return "lk:rw:lock:{" + name + "}" },
		shared:  true,
	},
	"semaphore": {
		grant: func(t *testing.T, svc *locks.Service, name string, ttl, maxHold time.Duration) string {
			req := semReq(5, 1, ttl)
			req.Keepalive, req.MaxHold = maxHold > 0, maxHold
			return mustSem(t, svc, name, req).Token
		},
		release: func(t *testing.T, svc *locks.Service, name, token string) {
			if _, err := svc.ReleaseSemaphore(t.Context(), name, token); err != nil {
				t.Fatal(err)
			}
		},
		counter: func(name string) string { return "lk:sem:lock:{" + name + "}" },
		shared:  true,
	},
}

// A name's last fence is kept for what its leases need, not a fixed day:
// a grant keeps it for the lease's TTL (a keep-alive lease's max hold) and
// the retention after it, a shorter lease of another holder never cuts
// that, and the release that leaves no lease keeps it for the retention
// only.
func TestFenceRetentionFollowsTheLease(t *testing.T) {
	retention := retentionConfig.FenceTTL
	for prim, c := range retentionCases {
		t.Run(prim, func(t *testing.T) {
			svc, m := newTestService(t, retentionConfig, store.Config{KeyPrefix: "lk:"})
			counter := c.counter("orders")
			long := c.grant(t, svc, "orders", time.Minute, 0)
			if ttl := m.TTL(counter); ttl != time.Minute+retention {
				t.Fatalf("%s TTL after a 1m lease = %s, want the lease and the retention %s", counter, ttl, time.Minute+retention)
			}
			if c.shared {
				short := c.grant(t, svc, "orders", time.Second, 0)
				if ttl := m.TTL(counter); ttl != time.Minute+retention {
					t.Errorf("%s TTL after a 1s lease beside the 1m one = %s, want %s still", counter, ttl, time.Minute+retention)
				}
				c.release(t, svc, "orders", short)
				if ttl := m.TTL(counter); ttl != time.Minute+retention {
					t.Errorf("%s TTL after a release that leaves the 1m lease = %s, want %s still", counter, ttl, time.Minute+retention)
				}
			}
			c.release(t, svc, "orders", long)
			if ttl := m.TTL(counter); ttl != retention {
				t.Errorf("%s TTL once no lease is left = %s, want the retention %s", counter, ttl, retention)
			}

			kept := c.grant(t, svc, "kept", 10*time.Second, time.Minute)
			if ttl := m.TTL(c.counter("kept")); ttl != time.Minute+retention {
				t.Errorf("%s TTL after a keep-alive lease of max hold 1m = %s, want the max hold and the retention %s",
					c.counter("kept"), ttl, time.Minute+retention)
			}
			c.release(t, svc, "kept", kept)
			if ttl := m.TTL(c.counter("kept")); ttl != retention {
				t.Errorf("%s TTL once the keep-alive lease is released = %s, want the retention %s", c.counter("kept"), ttl, retention)
			}
		})
	}
}

// The fence counter outlives every lease: grants, re-entries and renewals
// each keep it for the lease's TTL and the retention, so a lease renewed
// for longer than the retention still has its counter when it ends; a
// force-release, which leaves no lease, keeps it for the retention.
func TestFenceCounterRetentionRefreshed(t *testing.T) {
	svc, m := newTestService(t, retentionConfig, store.Config{KeyPrefix: "lk:"})
	const counter = "lk:fence:{orders}"
	retention := time.Minute + retentionConfig.FenceTTL // the lease's TTL, then the retention
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: time.Minute})
	if ttl := m.TTL(counter); ttl != retention {
		t.Fatalf("counter TTL after a grant = %s, want the lease and the retention %s", ttl, retention)
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
	if ttl := m.TTL(counter); ttl != retentionConfig.FenceTTL {
		t.Errorf("counter TTL after a force-release = %s, want the retention %s", ttl, retentionConfig.FenceTTL)
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
