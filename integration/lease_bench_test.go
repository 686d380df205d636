package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// BenchmarkLeasePath measures acquire + release on a real Redis from many
// goroutines at once, through the plain client (one round trip per script)
// and through the pipelined client the server uses (scripts of concurrent
// requests share round trips). It reports lease cycles per second for each
// and, in the pipelined run, its throughput as a ratio to the plain one.
func BenchmarkLeasePath(b *testing.B) {
	_, url := newRedis(b)
	var plainRate float64
	for _, pipelined := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "pipelined"}[pipelined]
		b.Run(name, func(b *testing.B) {
			svc := newScriptService(b, url, pipelined, 0)
			ctx := context.Background()
			var n atomic.Int64
			b.SetParallelism(16) // 16 goroutines per core, like concurrent HTTP requests
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					lockName := fmt.Sprintf("bench-%d", n.Add(1))
					lease, err := svc.Acquire(ctx, lockName, locks.AcquireRequest{TTL: 10 * time.Second})
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := svc.Release(ctx, lockName, lease.Token); err != nil {
						b.Error(err)
						return
					}
				}
			})
			rate := float64(b.N) / time.Since(start).Seconds()
			b.ReportMetric(rate, "cycles/s")
			if pipelined && plainRate > 0 {
				b.ReportMetric(rate/plainRate, "x-plain")
			} else {
				plainRate = rate
			}
		})
	}
}
