package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/redis/go-redis/v9"
)

// Concurrent decisions over 10,000 keys, through two instances of one
// deployment, share script calls on a Redis Cluster as on a single node
// (on a cluster a policy's counters are under 12 bucket hash tags, one
// call per bucket of a batch): at most 0.2 EVALSHA calls per decision,
// counted by every primary's INFO commandstats, and every key is allowed
// exactly its limit, for each algorithm. The policies fail closed and
// decisions have a minute, so a loaded machine can neither pass an uncounted
// answer nor fail a slow one. Each key's last request is a denial that
// reaches Redis (the first denial of a key is not in the cache of denials).
func TestRateLimitSpreadKeysShareScriptCalls(t *testing.T) {
	const keys, perKey, limit, workers = 10_000, 4, 3, 256
	var policies []ratelimit.Policy
	for _, alg := range []ratelimit.Algorithm{ratelimit.FixedWindow, ratelimit.SlidingWindow, ratelimit.TokenBucket} {
		p := policy("spread-"+string(alg), alg, limit, time.Hour) // no refill during the test
		p.Fail = ratelimit.FailClosed
		policies = append(policies, p)
	}
	slow := withServiceConfig(func(s *serviceConfig) { s.RateLimit.Timeout, s.OpTimeout = time.Minute, time.Minute })
	a := newTestEnv(t, withPolicies(policies...), slow)
	b := newTestEnv(t, beside(a), withPolicies(policies...), slow)
	for _, p := range policies {
		t.Run(p.Name, func(t *testing.T) {
			// Every key's requests in a random order of all of them, so
			// that concurrent decisions are of keys spread over the slots.
			order := make([]int, keys*perKey)
			for i := range order {
				order[i] = i % keys
			}
			rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			allowed := make([]atomic.Int32, keys)
			before := evalShaCalls(t, a.RDB)
			var next atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				e := []*testEnv{a, b}[w%2]
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(len(order)) {
							return
						}
						k := order[i]
						d, err := e.Svc.Check(t.Context(), ratelimit.Request{Policy: p.Name, Key: fmt.Sprintf("client-%d", k)})
						if err != nil || d.Degraded {
							t.Errorf("client-%d: %+v, %v; want a decision Redis made", k, d, err)
							return
						}
						if d.Allowed {
							allowed[k].Add(1)
						}
					}
				})
			}
			wg.Wait()
			calls := evalShaCalls(t, a.RDB) - before
			for k := range keys {
				if n := allowed[k].Load(); n != limit {
					t.Errorf("client-%d: %d allowed, want exactly %d", k, n, limit)
				}
			}
			perDecision := float64(calls) / float64(len(order))
			t.Logf("%s: %d EVALSHA calls for %d decisions: %.3f per decision", p.Name, calls, len(order), perDecision)
			if perDecision > 0.2 {
				t.Errorf("%.3f script calls per decision (%d for %d), want at most 0.2", perDecision, calls, len(order))
			}
		})
	}
}

// evalShaCalls is the EVALSHA calls of INFO commandstats summed over
// every primary.
func evalShaCalls(t testing.TB, rdb redis.UniversalClient) int64 {
	t.Helper()
	var mu sync.Mutex
	var prims []*redis.Client
	err := forEachPrimary(t.Context(), rdb, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		prims = append(prims, c)
		return nil
	})
	if err != nil {
		t.Fatalf("primaries: %v", err)
	}
	var n int64
	for _, c := range prims {
		n += commandCalls(t, c)["evalsha"]
	}
	return n
}
