package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// BenchmarkRateLimitDecision measures the decision path on a real Redis: a
// decision made by the script (one round trip) and a denial answered from
// the in-process cache of keys known to be over their limit. It reports
// both per-decision times and their ratio, so the result reads the same on
// any machine.
func BenchmarkRateLimitDecision(b *testing.B) {
	e := newTestEnv(b, withPolicies(policy("open", ratelimit.FixedWindow, 1_000_000_000, time.Hour),
		policy("shut", ratelimit.FixedWindow, 1, time.Hour)))
	ctx := context.Background()
	allowed := ratelimit.Request{Policy: "open", Key: "bench"}
	denied := ratelimit.Request{Policy: "shut", Key: "bench"}
	for range 2 {
		if _, err := e.Svc.Check(ctx, denied); err != nil {
			b.Fatal(err)
		}
	}
	var script, cached time.Duration
	for b.Loop() {
		start := time.Now()
		d, err := e.Svc.Check(ctx, allowed)
		script += time.Since(start)
		if err != nil || !d.Allowed {
			b.Fatalf("script decision: %+v, %v", d, err)
		}
		start = time.Now()
		d, err = e.Svc.Check(ctx, denied)
		cached += time.Since(start)
		if err != nil || d.Allowed || !d.Cached {
			b.Fatalf("cached denial: %+v, %v", d, err)
		}
	}
	b.ReportMetric(float64(script.Nanoseconds())/float64(b.N), "script-ns/decision")
	b.ReportMetric(float64(cached.Nanoseconds())/float64(b.N), "cached-ns/decision")
	b.ReportMetric(float64(script)/float64(max(cached, 1)), "script/cached")
}

// BenchmarkRateLimitDecisionsConcurrent measures decisions from many
// goroutines at once on a real Redis, through the pipelined client the
// server uses: each decision in a script call of its own (batch 1), then the
// decisions of concurrent callers sharing script calls (the server's
// default). It reports decisions per second, script calls per decision
// (from Redis's statistics) and, batched, the throughput as a ratio to one
// call per decision.
func BenchmarkRateLimitDecisionsConcurrent(b *testing.B) {
	_, url := startRedisContainer(b)
	var oneRate float64
	for _, batch := range []int{1, 0} {
		name := map[int]string{1: "one-call-each", 0: "batched"}[batch]
		b.Run(name, func(b *testing.B) {
			e := newTestEnv(b, withRedis(url), withServerClient(2*time.Second), withClient(serverClients[1].wrap),
				withPolicies(policy("open", ratelimit.FixedWindow, 1_000_000_000, time.Hour)),
				withServiceConfig(func(s *serviceConfig) { s.RateLimit.Batch = batch }))
			ctx := context.Background()
			var n atomic.Int64
			calls0 := commandCalls(b, e.RDB)["evalsha"]
			b.SetParallelism(16) // 16 goroutines per core, like concurrent gateway requests
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					key := fmt.Sprintf("client-%d", n.Add(1)%10_000)
					d, err := e.Svc.Check(ctx, ratelimit.Request{Policy: "open", Key: key})
					if err != nil || !d.Allowed {
						b.Errorf("decision: %+v, %v", d, err)
						return
					}
				}
			})
			rate := float64(b.N) / time.Since(start).Seconds()
			calls := commandCalls(b, e.RDB)["evalsha"] - calls0
			b.ReportMetric(rate, "decisions/s")
			b.ReportMetric(float64(calls)/float64(b.N), "calls/decision")
			if batch == 1 {
				oneRate = rate
			} else if oneRate > 0 {
				b.ReportMetric(rate/oneRate, "x-one-call-each")
			}
		})
	}
}
