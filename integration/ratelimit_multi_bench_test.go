package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// redisCPU is the CPU time Redis reports for itself (INFO cpu).
func redisCPU(b *testing.B, e *testEnv) time.Duration {
	info, err := e.RDB.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkMultiLimitDecision compares a three-limit decision (one script
// call checking and counting three keys, one per algorithm) with a
// one-limit decision, on a real Redis, without the deny cache (nothing is
// denied). Each sub-benchmark reports the CPU time per decision of
// Latchkey's process (cpu-ns/decision) and of Redis (redis-cpu-ns/decision);
// compare the runs' figures for the ratio. A one-limit decision goes
// through the batcher by default (a multi-limit one never does), so it is
// measured both ways.
func BenchmarkMultiLimitDecision(b *testing.B) {
	single := policy("one", ratelimit.FixedWindow, 1_000_000_000, time.Hour)
	three := ratelimit.Policy{Name: "three", Limits: []ratelimit.NamedLimit{
		{Name: "per-ip", Key: "ip", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 1_000_000_000, Window: time.Hour}},
		{Name: "per-key", Key: "header:X-Api-Key", Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Limit: 1_000_000_000, Window: time.Hour}},
		{Name: "global", Key: "const", Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 1_000_000_000, Window: time.Hour}},
	}}
	e := newTestEnv(b, withPolicies(single, three))
	unbatched := newTestEnv(b, beside(e), withPolicies(single),
		withServiceConfig(func(s *serviceConfig) { s.RateLimit.Batch = 1 }))
	for _, c := range []struct {
		name string
		e    *testEnv
		req  ratelimit.Request
	}{
		{"limits=1", e, ratelimit.Request{Policy: "one", Key: "192.0.2.1"}},
		{"limits=1,batch=1", unbatched, ratelimit.Request{Policy: "one", Key: "192.0.2.1"}},
		{"limits=3", e, ratelimit.Request{Policy: "three", Keys: []string{"192.0.2.1", "key-1", ratelimit.ConstKey}}},
	} {
		e := c.e
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			cpu0, rcpu0 := processCPU(), redisCPU(b, e)
			for b.Loop() {
				d, err := e.Svc.Check(ctx, c.req)
				if err != nil || !d.Allowed {
					b.Fatalf("%+v, %v", d, err)
				}
			}
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/decision")
			b.ReportMetric(float64((redisCPU(b, e)-rcpu0).Nanoseconds())/float64(b.N), "redis-cpu-ns/decision")
		})
	}
}
