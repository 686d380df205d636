package integration

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service"
)

// BenchmarkRateLimitDecision measures the decision path on a real Redis: a
// decision made by the script (one round trip) and a denial answered from
// the in-process cache of keys known to be over their limit. It reports
// both per-decision times and their ratio, so the result reads the same on
// any machine.
func BenchmarkRateLimitDecision(b *testing.B) {
	e := newTestEnv(b, withPolicies(policy("open", service.FixedWindow, 1_000_000_000, time.Hour),
		policy("shut", service.FixedWindow, 1, time.Hour)))
	ctx := context.Background()
	allowed := service.RateLimitRequest{Policy: "open", Key: "bench"}
	denied := service.RateLimitRequest{Policy: "shut", Key: "bench"}
	for range 2 {
		if _, err := e.Svc.CheckRateLimit(ctx, denied); err != nil {
			b.Fatal(err)
		}
	}
	var script, cached time.Duration
	for b.Loop() {
		start := time.Now()
		d, err := e.Svc.CheckRateLimit(ctx, allowed)
		script += time.Since(start)
		if err != nil || !d.Allowed {
			b.Fatalf("script decision: %+v, %v", d, err)
		}
		start = time.Now()
		d, err = e.Svc.CheckRateLimit(ctx, denied)
		cached += time.Since(start)
		if err != nil || d.Allowed || !d.Cached {
			b.Fatalf("cached denial: %+v, %v", d, err)
		}
	}
	b.ReportMetric(float64(script.Nanoseconds())/float64(b.N), "script-ns/decision")
	b.ReportMetric(float64(cached.Nanoseconds())/float64(b.N), "cached-ns/decision")
	b.ReportMetric(float64(script)/float64(max(cached, 1)), "script/cached")
}
