package ratelimit_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/prometheus/client_golang/prometheus"
)

func leased(name string, limit, lease int64) ratelimit.Policy {
	p := fixed(name, limit, time.Minute)
	p.Lease = lease
	return p
}

// Two instances on one Redis share a leased limit of 10, lease 4: each
// takes 4 units in one call and spends them without Redis; the counter
// only grows by leases, the first denial comes with the other instance
// holding at most its lease, and exactly 10 are allowed in all.
func TestLeaseTakesUnitsAndNeverExceedsTheLimit(t *testing.T) {
	m, rdb := newTestRedis(t)
	regA := prometheus.NewRegistry()
	a := mustNew(t, rdb, config{Registerer: regA, RateLimit: rlConfig(0, leased("l", 10, 4)).RateLimit})
	b := mustNew(t, rdb, config{Registerer: prometheus.NewRegistry(), RateLimit: rlConfig(0, leased("l", 10, 4)).RateLimit})
	pol, _ := a.Policy("l")
	key := a.Keys(pol, []string{"k"})[0]
	counter := func() string { v, _ := m.Get(key); return v }
	req := ratelimit.Request{Policy: "l", Key: "k"}

	mustCheck(t, a, req)
	if c := counter(); c != "4" {
		t.Fatalf("counter %s after a's first decision, want its lease of 4", c)
	}
	for range 3 {
		if d := mustCheck(t, a, req); !d.Allowed {
			t.Fatalf("a denied from its lease: %+v", d)
		}
	}
	if c := counter(); c != "4" {
		t.Fatalf("counter %s after a spent its lease, want 4 still", c)
	}
	mustCheck(t, b, req) // b leases 4: counter 8
	allowedA := int64(4)
	for {
		d := mustCheck(t, a, req)
		if !d.Allowed {
			if d.RetryAfter <= 0 {
				t.Errorf("denial without Retry-After: %+v", d)
			}
			break
		}
		allowedA++
	}
	// a got the last 2 units; b holds 3, within the bound (2 - 1) × 4.
	if allowedA != 6 || counter() != "10" {
		t.Fatalf("a allowed %d before its first denial, counter %s; want 6 and 10", allowedA, counter())
	}
	allowedB := int64(1)
	for mustCheck(t, b, req).Allowed {
		allowedB++
	}
	if allowedA+allowedB != 10 {
		t.Errorf("%d + %d allowed, want exactly 10", allowedA, allowedB)
	}
	if got := storetest.CounterValue(t, regA, "latchkey_ratelimit_lease_decisions_total", "policy", "l", "limit", "l", "source", "granted"); got != 2 {
		t.Errorf("a's granted leases %v, want 2", got)
	}
	if got := storetest.CounterValue(t, regA, "latchkey_ratelimit_lease_decisions_total", "policy", "l", "limit", "l", "source", "local"); got != 4 {
		t.Errorf("a's local decisions %v, want 4", got)
	}
}

// A lease is for fixed windows, at most the limit, and for policies only.
func TestLeaseValidation(t *testing.T) {
	sw := sliding("s", 10, time.Minute)
	sw.Lease = 2
	for _, c := range []struct {
		p    ratelimit.Policy
		want string
	}{
		{leased("big", 10, 11), "lease must be between 1 and the limit (10), got 11"},
		{sw, "lease applies to the fixed_window algorithm only"},
	} {
		if err := (ratelimit.Config{Policies: []ratelimit.Policy{c.p}}).Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
	svc, _ := newTestService(t, rlConfig(0))
	_, err := svc.Check(t.Context(), ratelimit.Request{Key: "k", Inline: &ratelimit.Limit{Limit: 5, Window: time.Minute, Lease: 2}})
	if err == nil || !strings.Contains(err.Error(), "lease is for the policies") {
		t.Errorf("inline lease: %v", err)
	}
	ps, err := ratelimit.ParsePolicies([]byte(`{policies: {p: {limit: 10, window: 1m, lease: 5}, q: {limits: [{name: a, limit: 5, window: 1s, lease: 2, shadow: true}]}}}`), false)
	if err != nil || ps[0].Lease != 5 || ps[1].Limits[0].Lease != 2 || !ps[1].Limits[0].Shadow {
		t.Errorf("parsed %+v, %v", ps, err)
	}
}

// A leased limit among others: the lease is taken in the decision's one
// call, later decisions spend it with only the other limit asked, and a
// request the other limit denies gives its unit back.
func TestLeaseInMultiLimitPolicyGivesBackOnDenial(t *testing.T) {
	g := nl("g", "const", ratelimit.FixedWindow, 100, time.Minute)
	g.Lease = 10
	svc, m := newTestService(t, rlConfig(0, multi("p", nl("a", "ip", ratelimit.FixedWindow, 2, time.Minute), g)))
	pol, _ := svc.Policy("p")
	global := svc.Keys(pol, []string{"x", ratelimit.ConstKey})[1]
	counter := func() string { v, _ := m.Get(global); return v }
	req := func(key string) ratelimit.Decision {
		return mustCheck(t, svc, ratelimit.Request{Policy: "p", Key: key})
	}

	for i, want := range []bool{true, true, false} {
		if d := req("k"); d.Allowed != want {
			t.Fatalf("request %d of k: allowed %v, want %v (%+v)", i+1, d.Allowed, want, d)
		}
	}
	if c := counter(); c != "10" {
		t.Fatalf("global counter %s, want the one lease of 10", c)
	}
	// 8 units are left: k's denied request gave its unit back.
	for i := range 8 {
		if d := req("k" + string(rune('a'+i))); !d.Allowed {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	if c := counter(); c != "10" {
		t.Fatalf("global counter %s after spending the lease, want 10", c)
	}
	if d := req("z"); !d.Allowed || counter() != "20" {
		t.Fatalf("next request: %+v, counter %s; want allowed with a new lease (20)", d, counter())
	}
}

// leaseKeys names n client keys.
func leaseKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("198.51.%d.%d", i/256, i%256)
	}
	return keys
}

// leaseRun asks svc for policy once per key of keys, from workers
// goroutines, and returns how many were allowed; a decision that fails is
// an error.
func leaseRun(t *testing.T, svc *ratelimit.Service, policy string, keys []string, workers int) int64 {
	t.Helper()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				d, err := svc.Check(t.Context(), ratelimit.Request{Policy: policy, Key: keys[i]})
				if err != nil {
					t.Errorf("Check(%s): %v", keys[i], err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return allowed.Load()
}

// wantLeaseCounters checks that every key's Redis counter of policy holds
// want.
func wantLeaseCounters(t *testing.T, m *miniredis.Miniredis, svc *ratelimit.Service, policy string, keys []string, want string) {
	t.Helper()
	pol, err := svc.Policy(policy)
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, k := range keys {
		if v, _ := m.Get(svc.Keys(pol, []string{k})[0]); v != want {
			if bad++; bad <= 3 {
				t.Errorf("key %s: Redis counter %q, want %s", k, v, want)
			}
		}
	}
	if bad > 3 {
		t.Errorf("... and %d more keys off", bad-3)
	}
}

// One instance, a leased limit of 3 per hour with lease 2, and one key more
// than the lease table holds, each asked once: the first MaxLeasePools
// keys take a lease of 2 and keep 1 unit each, so the table has no pool
// to drop for the last key, which is counted in Redis without a lease.
// Then each key is asked until denied: exactly 3 allowed per key, the
// fourth denied, every counter at 3 (no unit lost with a dropped pool),
// and the table never above its cap.
func TestLeaseTableAtCapPlusOneStaysExact(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, config{Registerer: reg, RateLimit: rlConfig(0, leased("l", 3, 2)).RateLimit})
	keys := leaseKeys(ratelimit.MaxLeasePools + 1)
	source := func(s string) float64 {
		return storetest.CounterValue(t, reg, "latchkey_ratelimit_lease_decisions_total", "policy", "l", "limit", "l", "source", s)
	}

	if got := leaseRun(t, svc, "l", keys, 1); got != int64(len(keys)) {
		t.Fatalf("%d of %d first requests allowed", got, len(keys))
	}
	if n := ratelimit.LeasePools(svc); n != ratelimit.MaxLeasePools {
		t.Errorf("%d pools after %d keys, want the cap %d", n, len(keys), ratelimit.MaxLeasePools)
	}
	wantLeaseCounters(t, m, svc, "l", keys[:ratelimit.MaxLeasePools], "2")
	wantLeaseCounters(t, m, svc, "l", keys[ratelimit.MaxLeasePools:], "1")
	if g, u := source("granted"), source("unleased"); g != ratelimit.MaxLeasePools || u != 1 {
		t.Errorf("%v granted and %v unleased decisions, want %d and 1", g, u, ratelimit.MaxLeasePools)
	}

	for i, want := range []int64{int64(len(keys)), int64(len(keys)), 0} {
		if got := leaseRun(t, svc, "l", keys, 1); got != want {
			t.Fatalf("round %d: %d of %d allowed, want %d", i+2, got, len(keys), want)
		}
	}
	wantLeaseCounters(t, m, svc, "l", keys, "3")
	if n := ratelimit.LeasePools(svc); n > ratelimit.MaxLeasePools {
		t.Errorf("%d pools, above the cap %d", n, ratelimit.MaxLeasePools)
	}
	if sum := source("granted") + source("local") + source("unleased"); sum != float64(3*len(keys)) {
		t.Errorf("lease decisions %v, want one per allowed request, %d", sum, 3*len(keys))
	}
}
