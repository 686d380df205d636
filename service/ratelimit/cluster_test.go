package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/latchkey/latchkey/service/store/clustertest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// On a real Redis Cluster, concurrent decisions on keys spread over every
// slot's primary are batched (one script call per slot of each batch) and
// count exactly: every key allows exactly its limit, for every algorithm,
// a leased limit, multi-limit policies (one slot, or one per key), a shadow policy (which never
// denies, and counts what it would deny), in the shared namespace and in a
// tenant's.
func TestClusterDecisionsCountExactly(t *testing.T) {
	c := clustertest.Shared(t)
	c.Flush(t)
	const limit = 5
	hour := time.Hour // windows far longer than the test: no refill in between
	shadow := fixed("shadow", limit, hour)
	shadow.Shadow = true
	policies := []ratelimit.Policy{
		fixed("fw", limit, hour), sliding("sw", limit, hour), bucket("tb", limit, hour, limit), leased("lease", limit, 2),
		multi("multi", nl("per-key", "ip", ratelimit.FixedWindow, limit, hour), nl("all", "const", ratelimit.FixedWindow, 1e6, hour)),
		// Keys by the request's key alone: each decision's keys in its
		// key's slot, a batch split over every primary.
		multi("multi-spread", nl("per-key", "ip", ratelimit.FixedWindow, limit, hour), nl("also", "ip", ratelimit.SlidingWindow, 1e6, hour)),
		shadow,
	}
	cfg := rlConfig(0, policies...)
	cfg.OpTimeout = time.Minute
	svc := mustNew(t, c.Client(t), cfg)
	const keys, perKey = 60, 8
	for _, tenant := range []string{"", "acme"} {
		ctx := store.WithTenant(context.Background(), tenant)
		for _, p := range policies {
			t.Run(fmt.Sprintf("%s/tenant=%q", p.Name, tenant), func(t *testing.T) {
				var mu sync.Mutex
				allowed, wouldDeny := make([]int, keys), make([]int, keys)
				var wg sync.WaitGroup
				for i := range keys * perKey {
					wg.Go(func() {
						k := i % keys
						d, err := svc.Check(ctx, ratelimit.Request{Policy: p.Name, Key: fmt.Sprintf("client-%d", k)})
						if err != nil || d.Degraded {
							t.Errorf("decision for client-%d: %+v, %v; want one Redis made", k, d, err)
							return
						}
						mu.Lock()
						defer mu.Unlock()
						if d.Allowed && !d.WouldDeny {
							allowed[k]++
						}
						if d.WouldDeny {
							wouldDeny[k]++
						}
					})
				}
				wg.Wait()
				for k := range keys {
					if allowed[k] != limit {
						t.Errorf("client-%d: %d allowed, want exactly %d", k, allowed[k], limit)
					}
					if p.Shadow && wouldDeny[k] != perKey-limit {
						t.Errorf("client-%d: %d would-deny answers, want %d", k, wouldDeny[k], perKey-limit)
					}
				}
			})
		}
	}
}

// A batch of decisions that could not connect to the primary the client's
// view named (a failover it had not caught up with) is sent again, once, to
// the primary the reloaded view names: every decision is counted once, and
// none is allowed uncounted (the policy fails open).
func TestClusterBatchAfterADeadPrimaryGoesToTheNewOne(t *testing.T) {
	c := clustertest.Shared(t)
	c.Flush(t)
	rdb := c.Client(t)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = dead.Close() })
	cc := &storetest.DeadPrimary{ClusterClient: rdb, Dead: dead}
	cfg := rlConfig(0, fixed("fw", 5, time.Hour))
	cfg.OpTimeout = time.Minute
	svc := mustNew(t, cc, cfg)
	for i := range 3 {
		d, err := svc.Check(t.Context(), ratelimit.Request{Policy: "fw", Key: "after-failover"})
		if err != nil || !d.Allowed || d.Degraded || d.Remaining != int64(4-i) {
			t.Fatalf("decision %d after the dead primary: %+v, %v; want allowed with %d remaining", i, d, err, 4-i)
		}
	}
	if got := cc.Dials.Load(); got != 1 {
		t.Errorf("calls to the dead primary = %d, want 1", got)
	}
}
