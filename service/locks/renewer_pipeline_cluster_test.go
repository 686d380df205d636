package locks_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/latchkey/latchkey/service/store/clustertest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// roundTrips counts the round trips to each node of a cluster client that
// carry script calls: one per call sent on its own, one per pipeline with
// one or more (a new connection's handshake is not counted).
type roundTrips struct {
	mu     sync.Mutex
	byNode map[string]int
}

func (r *roundTrips) hook(addr string) redis.Hook { return &nodeTrips{r: r, addr: addr} }

func (r *roundTrips) add(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byNode[addr]++
}

func (r *roundTrips) reset() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.byNode
	r.byNode = map[string]int{}
	return old
}

type nodeTrips struct {
	r    *roundTrips
	addr string
}

func (n *nodeTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (n *nodeTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			n.r.add(n.addr)
		}
		return next(ctx, cmd)
	}
}

func (n *nodeTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "evalsha" }) {
			n.r.add(n.addr)
		}
		return next(ctx, cmds)
	}
}

// TestClusterRenewerPipelinesSparseShards: on a real Redis Cluster, keep-alive
// leases in many slots (one per shard) that fall due together are renewed
// in one renewer round by a few round trips per primary — the claim and the
// settle on the directory's primary, one pipeline of every shard's
// keepalive_due and one of every renewal batch on each — not two calls per
// shard.
func TestClusterRenewerPipelinesSparseShards(t *testing.T) {
	c := clustertest.Shared(t)
	c.Flush(t)
	rdb := c.Client(t)
	trips := &roundTrips{byNode: map[string]int{}}
	rdb.OnNewNode(func(n *redis.Client) { n.AddHook(trips.hook(n.Options().Addr)) })
	const prefix = "lkp:"
	svc := mustNew(t, rdb, locks.Config{}, store.Config{KeyPrefix: prefix, Cluster: true})
	ctx := t.Context()
	// A first round, with nothing due: its reconciliation has ended before
	// the round that is counted.
	locks.RenewShardsNow(ctx, svc)
	locks.WaitReconciled(svc)

	// Due a third of the TTL after each grant: long enough for the grants
	// of every lease before the first falls due, on a busy machine.
	const n, ttl = 96, 15 * time.Second
	var names []string
	slots := map[int]bool{}
	for i := 0; len(names) < n; i++ {
		name := fmt.Sprintf("sparse-%d", i)
		if slot := store.Slot(name); !slots[slot] {
			slots[slot] = true
			names = append(names, name)
		}
	}
	leases := make([]locks.Lease, n)
	var lastDue time.Time
	perPrimary := map[string]int{}
	var acquirers sync.WaitGroup
	for w := range 8 {
		acquirers.Go(func() {
			for i := w; i < n; i += 8 {
				l, err := svc.Acquire(ctx, names[i], locks.AcquireRequest{TTL: ttl, Keepalive: true})
				if err != nil {
					t.Errorf("acquire %s: %v", names[i], err)
				}
				leases[i] = l
			}
		})
	}
	acquirers.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i, name := range names {
		if due := leases[i].ExpiresAt.Add(-ttl + ttl/3); due.After(lastDue) {
			lastDue = due
		}
		node, err := rdb.MasterForKey(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		perPrimary[node.Options().Addr]++
	}
	if len(perPrimary) < 3 {
		t.Fatalf("leases on %d primaries, want every one of the three", len(perPrimary))
	}
	waitFor(t, "every lease is due (Redis clock)", func() bool {
		now, err := rdb.Time(ctx).Result()
		return err == nil && now.After(lastDue)
	})
	// and every shard is due in the directory: a grant marks its shard
	// after the grant, so on a busy machine a shard's mark can fall due
	// later than its leases do (the claim takes only the shards due)
	dirDue, _ := locks.DirKeys(prefix)
	waitFor(t, "every shard is due in the directory (Redis clock)", func() bool {
		last, err := rdb.ZRangeWithScores(ctx, dirDue, -1, -1).Result()
		now, terr := rdb.Time(ctx).Result()
		return err == nil && terr == nil && len(last) == 1 && now.UnixMilli() > int64(last[0].Score)
	})

	trips.reset()
	locks.RenewShardsNow(ctx, svc)
	counted := trips.reset()

	for i, name := range names {
		st, err := svc.Inspect(ctx, name, leases[i].Token)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Owned || !st.ExpiresAt.After(leases[i].ExpiresAt) {
			t.Errorf("%s: owned %v, expires at %v, want renewed past %v", name, st.Owned, st.ExpiresAt, leases[i].ExpiresAt)
		}
	}
	for addr, shards := range perPrimary {
		// Claim, keepalive_due, renewal batches, settle.
		if got := counted[addr]; got > 4 {
			t.Errorf("primary %s: %d round trips to renew the leases of %d shards, want at most 4", addr, got, shards)
		}
	}
	t.Logf("%d leases in %d shards on %v: round trips per node %v", n, len(slots), perPrimary, counted)
}
