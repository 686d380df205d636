package integration

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// leasedPolicy is one fixed-window limit of leaseLimit per hour whose
// instances take leaseUnits at a time.
const leaseLimit, leaseUnits = 1000, 50

func leasedPolicy() ratelimit.Policy {
	return ratelimit.Policy{Name: "leased", Key: "header:X-Api-Key",
		Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: leaseLimit, Window: time.Hour, Lease: leaseUnits}}
}

// leaseRound has 32 clients ask env the gate until one is denied, or
// until max answers, and returns the allowed and denied counts.
func leaseRound(t *testing.T, envs []*testEnv, max int64) (allowed, denied int64) {
	t.Helper()
	var ok, no, asked atomic.Int64
	var wg sync.WaitGroup
	for i := range 32 {
		e := envs[i%len(envs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for no.Load() == 0 && asked.Add(1) <= max {
				status, _, err := e.gateAsk(http.MethodHead, "/v1/ratelimit/gate/leased", "X-Api-Key", "k")
				if err != nil || status != http.StatusOK && status != http.StatusTooManyRequests {
					t.Errorf("gate: %d, %v", status, err)
					return
				}
				if status == http.StatusOK {
					ok.Add(1)
				} else {
					no.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load(), no.Load()
}

// Three instances × 32 clients on a leased limit of 1000 per window, lease
// 50: the instances spend leases without Redis, yet never allow more than
// the limit, and the first denial comes after at least limit − (3 − 1) ×
// lease allowed requests. Proven by counts: the Redis counter, the answers
// and each instance's lease metrics.
func TestLeasedQuotaIsExactAcrossInstances(t *testing.T) {
	envs := threeInstances(t, withPolicies(leasedPolicy()))
	e := envs[0]
	pol, err := e.Svc.Policy("leased")
	if err != nil {
		t.Fatal(err)
	}
	key := e.Svc.Keys(pol, []string{"k"})[0]

	// Every instance takes leases: 32 clients spread over the three.
	a1, d1 := leaseRound(t, envs, 600)
	if a1 != 600 || d1 != 0 {
		t.Fatalf("round 1: %d allowed, %d denied; want 600 allowed", a1, d1)
	}
	// Only the first instance, until its first denial: the others still
	// hold what they leased, at most 50 each.
	a2, d2 := leaseRound(t, envs[:1], 2000)
	if d2 == 0 {
		t.Fatalf("round 2: no denial in %d allowed requests", a2)
	}
	if got := a1 + a2; got > leaseLimit || got < leaseLimit-2*leaseUnits {
		t.Errorf("first denial after %d allowed, want between %d and %d", got, leaseLimit-2*leaseUnits, leaseLimit)
	}
	if n, err := e.RDB.Get(t.Context(), key).Int64(); err != nil || n != leaseLimit {
		t.Errorf("Redis counter %d (%v) at the first denial, want the whole limit %d leased out", n, err, leaseLimit)
	}
	// The other two instances spend what they hold, then deny too: exactly
	// the limit was allowed in all.
	a3, _ := leaseRound(t, envs[1:2], 2000)
	a4, _ := leaseRound(t, envs[2:], 2000)
	if got := a1 + a2 + a3 + a4; got != leaseLimit {
		t.Errorf("%d allowed in all (%d + %d + %d + %d), want exactly %d", got, a1, a2, a3, a4, leaseLimit)
	}
	if n, err := e.RDB.Get(t.Context(), key).Int64(); err != nil || n != leaseLimit {
		t.Errorf("Redis counter %d (%v), want %d", n, err, leaseLimit)
	}
	// Each lease took 50 units from Redis in one call (the last what was
	// left): 1000 / 50 = 20 grants, every other allowed decision local.
	var granted, local float64
	for _, e := range envs {
		m := metrics(t, e)
		granted += m[`latchkey_ratelimit_lease_decisions_total{limit="leased",policy="leased",source="granted"}`]
		local += m[`latchkey_ratelimit_lease_decisions_total{limit="leased",policy="leased",source="local"}`]
	}
	if granted != leaseLimit/leaseUnits || granted+local != leaseLimit {
		t.Errorf("lease metrics: %v granted, %v local; want %d granted and %d in all", granted, local, leaseLimit/leaseUnits, leaseLimit)
	}
}
