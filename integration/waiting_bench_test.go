package integration

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkHandoff measures the hand-off latency from the moment a holder
// sends its release to the moment the next waiter (already waiting) has its
// grant, over HTTP on a real Redis, and reports the median and the 99th
// percentile. It does not assert a time.
func BenchmarkHandoff(b *testing.B) {
	for _, mode := range []struct{ name, body string }{
		{"plain", `{"ttl":"10s","wait":"10s"}`},
		{"fair", `{"ttl":"10s","wait":"10s","fair":true}`},
	} {
		b.Run(mode.name, func(b *testing.B) {
			rdb, url := newRedis(b)
			e := newTestEnv(b, withRedisClient(rdb, url))
			token := e.acquire(b, "handoff", mode.body).Token
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				got := make(chan response, 1)
				go func() { got <- e.send(b.Context(), "POST", "/v1/locks/handoff", mode.body) }()
				e.waitForWaiters(b, "handoff", 1)
				b.StartTimer()
				start := time.Now()
				if r := e.send(b.Context(), "DELETE", "/v1/locks/handoff", "", "Lock-Token", token); r.Status != http.StatusOK {
					b.Fatalf("release: %d %s", r.Status, r.Body)
				}
				r := <-got
				lat = append(lat, time.Since(start))
				if r.Status != http.StatusCreated {
					b.Fatalf("waiter: %d %s", r.Status, r.Body)
				}
				token = r.Token()
			}
			b.StopTimer()
			slices.Sort(lat)
			ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(ms(0.5), "p50-ms")
			b.ReportMetric(ms(0.99), "p99-ms")
		})
	}
}
