package integration

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// withKeyPrefix gives a server the key prefix of another, so several
// servers share their counters as instances of one deployment do.

// multiLimitPolicy limits per client address (sliding window, never
// binding here), per API key (fixed window, 20 per key) and in total
// (token bucket, 100).
func multiLimitPolicy() ratelimit.Policy {
	return ratelimit.Policy{Name: "multi", Limits: []ratelimit.NamedLimit{
		{Name: "per-ip", Key: "ip", Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Limit: 100000, Window: time.Hour}},
		{Name: "per-key", Key: "header:X-Api-Key", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 20, Window: time.Hour}},
		{Name: "global", Key: "const", Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 100, Window: time.Hour}},
	}}
}

// threeInstances starts three servers sharing one Redis and one key prefix.
// Their decisions wait for Redis up to a minute: a fail-open answer after a
// timeout on a loaded machine would count nothing and spoil the exact
// counts these tests prove.
func threeInstances(t testing.TB, opts ...envOption) []*testEnv {
	opts = append([]envOption{withServiceConfig(func(s *serviceConfig) {
		s.RateLimit.Timeout, s.OpTimeout = time.Minute, time.Minute
	})}, opts...)
	e0 := newTestEnv(t, opts...)
	envs := []*testEnv{e0}
	for range 2 {
		envs = append(envs, newTestEnv(t, append(opts, beside(e0))...))
	}
	return envs
}

// gateRound sends perClient gate requests from each of 32 clients on each
// instance, client i with API key keys[i % len(keys)], and counts the
// answers: allowed, and denied by each binding limit.
func gateRound(t *testing.T, envs []*testEnv, perClient int, keys []string) (allowed int64, deniedBy map[string]int64) {
	t.Helper()
	var ok atomic.Int64
	var mu sync.Mutex
	deniedBy = map[string]int64{}
	var wg sync.WaitGroup
	for i := range 32 * len(envs) {
		e, key := envs[i%len(envs)], keys[i%len(keys)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perClient {
				status, h, err := e.gateAsk(http.MethodHead, "/v1/ratelimit/gate/multi", "X-Api-Key", key)
				switch {
				case err != nil:
					t.Error(err)
					return
				case status == http.StatusOK:
					ok.Add(1)
				case status == http.StatusTooManyRequests:
					var name string
					_, _ = fmt.Sscanf(h.Get("RateLimit"), "%q", &name)
					mu.Lock()
					deniedBy[name]++
					mu.Unlock()
				default:
					t.Errorf("status %d", status)
					return
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load(), deniedBy
}

// Three instances × 32 clients on one Redis under a three-limit policy:
// first the per-key limit binds (4 keys × 20), then the global one (the 20
// tokens left); every count in Redis is exactly what was allowed, so the
// 560 denials consumed nothing in any limit.
func TestMultiLimitExactCountsAcrossInstances(t *testing.T) {
	envs := threeInstances(t, withPolicies(multiLimitPolicy()))
	e := envs[0]
	keyOf := func(limit, alg, key string) string {
		return e.Prefix + "rl:{multi}:" + limit + ":" + alg + ":" + key
	}

	var calls0 int64
	if !onCluster() { // INFO reaches one node of a cluster
		calls0 = commandCalls(t, e.RDB)["evalsha"]
	}
	allowed, deniedBy := gateRound(t, envs, 5, []string{"a", "b", "c", "d"})
	if allowed != 80 || deniedBy["per-key"] != 400 || len(deniedBy) != 1 {
		t.Fatalf("round 1: %d allowed, denials by limit %v; want 80 allowed and 400 denied by per-key", allowed, deniedBy)
	}
	// Concurrent decisions share script calls (ratelimit_multi_batch.lua).
	if !onCluster() {
		if calls := commandCalls(t, e.RDB)["evalsha"] - calls0; calls >= 480 {
			t.Errorf("480 decisions made %d script calls, want fewer: concurrent ones share a call", calls)
		}
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		if n, err := e.RDB.Get(t.Context(), keyOf("per-key", "fw", k)).Int64(); err != nil || n != 20 {
			t.Errorf("per-key counter of %s = %d (%v), want 20", k, n, err)
		}
	}

	allowed, deniedBy = gateRound(t, envs, 2, []string{"e", "f", "g", "h"})
	if allowed != 20 || deniedBy["global"] != 172 || len(deniedBy) != 1 {
		t.Fatalf("round 2: %d allowed, denials by limit %v; want 20 allowed and 172 denied by global", allowed, deniedBy)
	}
	var sum int64
	for _, k := range []string{"e", "f", "g", "h"} {
		n, err := e.RDB.Get(t.Context(), keyOf("per-key", "fw", k)).Int64()
		if err != nil && n != 0 {
			t.Fatalf("per-key counter of %s: %v", k, err)
		}
		sum += n
	}
	if sum != 20 {
		t.Errorf("per-key counters of round 2 sum to %d, want 20 (the global limit's last tokens)", sum)
	}
	// The sliding window stores its current and previous counts (see
	// ratelimit_sliding_window.lua): together exactly the 100 allowed.
	v, err := e.RDB.Get(t.Context(), keyOf("per-ip", "sw", "127.0.0.1")).Result()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(v[len(v)-1:])
	c, _ := strconv.ParseInt(v[len(v)-1-2*n:len(v)-1-n], 10, 64)
	p, _ := strconv.ParseInt(v[len(v)-1-n:len(v)-1], 10, 64)
	if c+p != 100 {
		t.Errorf("per-ip sliding window %q holds %d + %d, want 100 in all", v, c, p)
	}
	// The bucket is empty: one more request from a fresh key and address
	// is denied by global alone.
	r := e.do(t, http.MethodPost, "/v1/ratelimit/check", `{"policy":"multi","key":"probe"}`)
	if r.Status != http.StatusTooManyRequests || r.JSON(t)["binding"] != "global" {
		t.Errorf("probe: %d %s, want 429 bound by global", r.Status, r.Body)
	}
	if ks := e.keys(t); len(ks) != 10 {
		t.Errorf("keys %v, want 10 (8 API keys, one address, one global)", ks)
	}
	// The policies listing shows the limits (its shape checked against
	// api/openapi.yaml by the client).
	r = e.do(t, http.MethodGet, "/v1/ratelimit/policies", "")
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body),
		`"limits":[{"name":"per-ip","key":"ip","limit":100000,"window":"1h0m0s","algorithm":"sliding_window"},`) {
		t.Errorf("policies: %d %s", r.Status, r.Body)
	}
}
