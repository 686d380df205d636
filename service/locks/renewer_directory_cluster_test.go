package locks_test

import (
	"context"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/latchkey/latchkey/service/store/clustertest"
)

// Keep-alive leases on healthy primaries are renewed while the shard
// directory's node is gone: with the directory's primary and its replica
// both killed (its slots served by nobody), a lease on each other primary
// stays held, by the same token and fence, well past twice its TTL after
// the kill. Without the directory no shard could be claimed, and every
// lease ran out.
func TestClusterKeepaliveOutlivesTheDirectorysNode(t *testing.T) {
	c := clustertest.Start(t)
	allowPartialCoverage(t, c)
	rdb := c.Client(t)
	svc := mustNew(t, rdb, locks.Config{}, store.Config{Cluster: true, OpTimeout: 500 * time.Millisecond})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.RunRenewer(ctx) }()
	t.Cleanup(func() { stop(); <-done; _ = svc.Close() })

	due, _ := locks.DirKeys(locks.KeyPrefix(svc))
	dirNode, err := rdb.MasterForKey(t.Context(), due)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	leases := map[string]locks.Lease{} // name: lease, on the primaries that stay
	for addr, names := range namesPerPrimary(t, rdb, svc, 1) {
		l, err := svc.Acquire(t.Context(), names[0], locks.AcquireRequest{TTL: ttl, Keepalive: true})
		if err != nil {
			t.Fatal(err)
		}
		if addr != dirNode.Options().Addr {
			leases[names[0]] = l
		}
	}
	if len(leases) != 2 {
		t.Fatalf("leases on %d other primaries, want 2", len(leases))
	}
	var replica string
	eventuallyTrue(t, "the directory's node has a replica attached", func() bool {
		replica = replicaOf(t.Context(), dirNode)
		return replica != ""
	})
	var killedAt time.Time // by the Redis clock of the primaries that stay
	for name := range leases {
		node, err := rdb.MasterForKey(t.Context(), locks.Channel(svc, name))
		if err != nil {
			t.Fatal(err)
		}
		if killedAt, err = node.Time(t.Context()).Result(); err != nil {
			t.Fatal(err)
		}
		break
	}
	c.Kill(t, replica)
	c.Kill(t, dirNode.Options().Addr)

	for name, l := range leases {
		eventuallyTrue(t, name+" renewed past twice its TTL after the directory's node died", func() bool {
			st, err := svc.Inspect(t.Context(), name, l.Token)
			if err != nil {
				return false
			}
			if !st.Held || !st.Owned || st.Fence != l.Fence {
				t.Fatalf("%s after the directory's node died: held %v, owned %v, fence %d (was %d): the lease lapsed",
					name, st.Held, st.Owned, st.Fence, l.Fence)
			}
			return st.ExpiresAt.After(killedAt.Add(2 * ttl))
		})
	}
}
