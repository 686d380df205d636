package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// lagRecorder passes every call through and keeps the per-lease lag that
// renew_batch reports for the leases it renewed.
type lagRecorder struct {
	store.Client
	mu      sync.Mutex
	lags    []int64 // ms
	batches int
}

func (l *lagRecorder) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmd := l.Client.EvalSha(ctx, sha, keys, args...)
	if sha != renewBatchSHA {
		return cmd
	}
	arr, _ := cmd.Val().([]any)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches++
	for i := 1; i+2 < len(arr); i += 3 {
		if code, _ := arr[i].(int64); code == 1 {
			lag, _ := arr[i+1].(int64)
			l.lags = append(l.lags, lag)
		}
	}
	return cmd
}

func (l *lagRecorder) take() (lags []int64, batches int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lags, batches = l.lags, l.batches
	l.lags, l.batches = nil, 0
	return lags, batches
}

// redisInfo reads the numeric fields of INFO section.
func redisInfo(tb testing.TB, rdb redis.UniversalClient, section string) map[string]float64 {
	tb.Helper()
	s, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		tb.Fatalf("INFO %s: %v", section, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				out[k] = f
			}
		}
	}
	return out
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkKeepalive10kLeases holds 10,000 keep-alive leases with ttl 3s on
// one instance (one renewer, batches of 100) on a private Redis, and reports
// for each TTL of wall time: the renewal lag (p50, p99, max; the target is
// under ttl/3 = 1s), renewals and renewal script calls per second, the CPU
// of this process and of Redis (in cores), and Redis commands per second
// (commands run inside scripts included).
func BenchmarkKeepalive10kLeases(b *testing.B) {
	const leases, ttl = 10000, 3 * time.Second
	_, url := startRedisContainer(b)
	rdb := newClient(b, url)
	rec := &lagRecorder{Client: rdb}
	e := newTestEnv(b, withRedisClient(rdb, url), withClientOf(func(redis.UniversalClient) store.Client { return rec }), withRenewer(0))
	defer e.stopRenewer()
	svc := e.Svc
	for i := range leases {
		if _, err := svc.Acquire(b.Context(), fmt.Sprintf("bench-%d", i), locks.AcquireRequest{TTL: ttl, Keepalive: true}); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(ttl) // every lease renewed at least twice before we measure
	rec.take()

	info0, cmd0 := redisInfo(b, rdb, "cpu"), redisInfo(b, rdb, "stats")
	cpu0, start := processCPU(), time.Now()
	b.ResetTimer()
	for range b.N {
		time.Sleep(ttl)
	}
	b.StopTimer()
	wall := time.Since(start).Seconds()
	cpu := (processCPU() - cpu0).Seconds()
	info1, cmd1 := redisInfo(b, rdb, "cpu"), redisInfo(b, rdb, "stats")
	lags, batches := rec.take()

	n, err := rdb.ZCard(context.Background(), e.registryKey()).Result()
	if err != nil || n != leases {
		b.Fatalf("registry holds %d leases (%v), want %d: leases were lost", n, err, leases)
	}
	if len(lags) == 0 {
		b.Fatal("no renewals measured")
	}
	slices.Sort(lags)
	q := func(p float64) float64 { return float64(lags[int(p*float64(len(lags)-1))]) }
	redisCPU := info1["used_cpu_user"] + info1["used_cpu_sys"] - info0["used_cpu_user"] - info0["used_cpu_sys"]
	b.ReportMetric(q(0.50), "lag-p50-ms")
	b.ReportMetric(q(0.99), "lag-p99-ms")
	b.ReportMetric(float64(lags[len(lags)-1]), "lag-max-ms")
	b.ReportMetric(float64(len(lags))/wall, "renewals/s")
	b.ReportMetric(float64(batches)/wall, "batches/s")
	b.ReportMetric(cpu/wall, "cpu-cores")
	b.ReportMetric(redisCPU/wall, "redis-cpu-cores")
	b.ReportMetric((cmd1["total_commands_processed"]-cmd0["total_commands_processed"])/wall, "redis-cmds/s")
}
