package integration

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/redis/go-redis/v9"
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

// One instance, 50,000 clients (over 12 times the keys whose units an
// instance keeps) on a per-client leased limit of 3 per hour with lease 2,
// asked by 16 goroutines, every client once a round, while 4 hot clients
// of a limit of 1000 with lease 10 are asked 1,100 times each. Rounds 1 to
// 3 allow every request (none denied early), round 4 denies every one;
// every counter in Redis ends at exactly 3, each hot client had exactly
// 1000 allowed, the lease metrics count every allowed decision once, and
// the instance never keeps more than ratelimit.MaxLeasePools pools.
func TestLeasedQuotaIsExactAtAnyNumberOfKeys(t *testing.T) {
	const clients, limit, hotLimit, hotAsks = 50_000, 3, 1000, 1100
	perClient := ratelimit.Policy{Name: "per-client", Key: "ip",
		Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: limit, Window: time.Hour, Lease: 2}}
	hot := ratelimit.Policy{Name: "hot", Key: "ip",
		Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: hotLimit, Window: time.Hour, Lease: 10}}
	e := newTestEnv(t, withPolicies(perClient, hot), withServiceConfig(func(s *serviceConfig) {
		s.RateLimit.Timeout, s.OpTimeout = time.Minute, time.Minute
	}))
	keys := make([]string, clients)
	for i := range keys {
		keys[i] = fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255)
	}
	ask := func(policy, key string) bool {
		d, err := e.Svc.Check(t.Context(), ratelimit.Request{Policy: policy, Key: key})
		if err != nil || d.Degraded {
			t.Errorf("%s %s: %+v, %v", policy, key, d, err)
		}
		return d.Allowed
	}
	var hotAllowed [4]atomic.Int64
	var hotWG sync.WaitGroup
	for h := range hotAllowed {
		hotWG.Go(func() {
			for range hotAsks {
				if ask("hot", fmt.Sprint("hot-", h)) {
					hotAllowed[h].Add(1)
				}
			}
		})
	}
	round := func() (allowed int64) {
		var n atomic.Int64
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := w; i < clients; i += 16 {
					if ask("per-client", keys[i]) {
						n.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return n.Load()
	}
	pools := func() float64 { return metricValue(t, e, "latchkey_ratelimit_lease_pools") }

	for r, want := range []int64{clients, clients, clients, 0} {
		if got := round(); got != want {
			t.Fatalf("round %d: %d of %d allowed, want %d", r+1, got, clients, want)
		}
		if n := pools(); n > ratelimit.MaxLeasePools {
			t.Fatalf("round %d: %v pools kept, above the cap %d", r+1, n, ratelimit.MaxLeasePools)
		}
	}
	hotWG.Wait()
	for h := range hotAllowed {
		if got := hotAllowed[h].Load(); got != hotLimit {
			t.Errorf("hot-%d: %d of %d allowed, want exactly %d", h, got, hotAsks, hotLimit)
		}
	}

	pol, err := e.Svc.Policy("per-client")
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for start := 0; start < clients; start += 1000 {
		cmds, err := e.RDB.Pipelined(t.Context(), func(p redis.Pipeliner) error {
			for _, k := range keys[start:min(start+1000, clients)] {
				p.Get(t.Context(), e.Svc.Keys(pol, []string{k})[0])
			}
			return nil
		})
		if err != nil {
			t.Fatalf("GET counters: %v", err)
		}
		for i, c := range cmds {
			if n, err := c.(*redis.StringCmd).Int64(); err != nil || n != limit {
				if bad++; bad <= 3 {
					t.Errorf("%s: Redis counter %d (%v), want %d", keys[start+i], n, err, limit)
				}
			}
		}
	}
	if bad > 3 {
		t.Errorf("... and %d more counters off", bad-3)
	}

	m := metrics(t, e)
	var decisions float64
	for _, source := range []string{"local", "granted", "unleased"} {
		decisions += m[`latchkey_ratelimit_lease_decisions_total{limit="per-client",policy="per-client",source="`+source+`"}`]
	}
	if decisions != clients*limit {
		t.Errorf("%v lease decisions of per-client, want one per allowed request, %d", decisions, clients*limit)
	}
	if u := m[`latchkey_ratelimit_lease_decisions_total{limit="per-client",policy="per-client",source="unleased"}`]; u == 0 {
		t.Error("no decision counted without a lease: the table never filled")
	}
}
