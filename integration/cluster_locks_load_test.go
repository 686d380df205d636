package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// TestClusterLocksRenewerKeepsUp: two instances keep 400 keep-alive leases
// with a 3s TTL (a renewal due every second), on names in about 400
// different slots, renewed for three TTLs: none is lost. The renewers visit
// only due shards, up to RenewParallel at once. The load is a few times
// below what a busy two-core machine under the race detector keeps up with,
// so the test shows every shard is visited in time, not how fast: latchbench's
// keepidle scenario measures that (docs/scaling.md). Skipped with -short.
func TestClusterLocksRenewerKeepsUp(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test: runs without -short")
	}
	c := startLockCluster(t)
	const prefix = "lkl:"
	cfg := locks.Config{}
	a, b := c.service(t, prefix, cfg), c.service(t, prefix, cfg)
	rdb := c.client(t)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, s := range []*locks.Service{a, b} {
		wg.Go(func() { s.RunRenewer(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	const n, ttl = 400, 3 * time.Second
	tokens := make([]string, n)
	expires := make([]int64, n)
	var acquirers sync.WaitGroup
	var failed atomic.Int64
	for w := range 16 {
		acquirers.Go(func() {
			for i := w; i < n; i += 16 {
				s := []*locks.Service{a, b}[i%2]
				l, err := s.Acquire(t.Context(), fmt.Sprintf("load-%d", i), locks.AcquireRequest{TTL: ttl, Keepalive: true, MaxHold: time.Hour})
				if err != nil {
					failed.Add(1)
					continue
				}
				tokens[i], expires[i] = l.Token, l.ExpiresAt.UnixMilli()
			}
		})
	}
	acquirers.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d acquires failed", failed.Load())
	}
	slots := map[int]bool{}
	for i := range n {
		slots[store.Slot(fmt.Sprintf("load-%d", i))] = true
	}
	start := time.Now()
	end := slices.Max(expires) + 3*ttl.Milliseconds()
	eventually(t, 2*time.Minute, "the Redis clock passes the last lease's expiry three TTLs over", func() bool {
		return redisNowMS(t, rdb, "{load-0}") > end
	})
	lost := 0
	for i, tok := range tokens {
		st, err := b.Inspect(t.Context(), fmt.Sprintf("load-%d", i), tok)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Owned {
			lost++
			if lost <= 5 {
				t.Errorf("load-%d: lost (%q)", i, st.LostReason)
			}
		}
	}
	t.Logf("%d keep-alive leases in %d slots, TTL %s, for %s: %d lost", n, len(slots), ttl, time.Since(start), lost)
}
