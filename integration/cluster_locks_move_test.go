package integration

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// TestClusterLocksSlotMove: a waiter's wake-up channel moves with its slot
// to another primary while the waiter waits. The old primary ends the
// waiter's sharded subscription; the waiter's instance subscribes again on
// the new primary, and a release there (of a lease that moved with the
// slot) wakes the waiter long before its wait ends. A keep-alive lease in
// the moved slot keeps being renewed on its new primary.
func TestClusterLocksSlotMove(t *testing.T) {
	c := startLockCluster(t)
	const prefix = "lkm:"
	cfg := locks.Config{RenewPoll: 20 * time.Millisecond}
	a, b := c.service(t, prefix, cfg), c.service(t, prefix, cfg)
	rdb := c.client(t)
	ctx := t.Context()
	const name = "moving"
	channel := locks.KeysOf(prefix, name).Channel
	slot := store.Slot(name)

	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); a.RunRenewer(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	const kaTTL = 2 * time.Second
	ka, err := a.Acquire(ctx, name+"-ka", locks.AcquireRequest{TTL: kaTTL, Keepalive: true, MaxHold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The keep-alive lease's name is in another slot; one in the moving
	// slot is a semaphore permit with the same name.
	kaSem, err := a.AcquireSemaphore(ctx, name, locks.SemaphoreRequest{
		AcquireRequest: locks.AcquireRequest{TTL: kaTTL, Keepalive: true, MaxHold: time.Hour}, Permits: 1, Count: 1})
	if err != nil {
		t.Fatal(err)
	}

	held, err := a.Acquire(ctx, name, locks.AcquireRequest{TTL: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wait := locks.AcquireRequest{TTL: time.Minute, Wait: time.Minute}
	start := redisNowMS(t, rdb, "{"+name+"}")
	got := goAcquire(func() (time.Time, error) {
		l, err := b.Acquire(ctx, name, wait)
		return l.ExpiresAt.Add(-l.TTL), err
	})
	waitShardSubscribed(t, rdb, channel)
	eventually(t, 10*time.Second, "the waiter is registered", func() bool {
		st, err := a.Inspect(ctx, name, "")
		return err == nil && st.Waiters == 1
	})

	t0 := time.Now()
	dst := moveSlot(t, rdb, slot)
	t.Logf("slot moved in %s", time.Since(t0))
	eventually(t, 30*time.Second, "the waiter's channel is subscribed again on the slot's new primary", func() bool {
		n, err := dst.PubSubShardNumSub(ctx, channel).Result()
		return err == nil && n[channel] == 1
	})
	t.Logf("subscribed again %s after the move began", time.Since(t0))
	if _, err := a.Release(ctx, name, held.Token); err != nil {
		t.Fatal(err)
	}
	wokenBeforeTheWaitEnded(t, got, start, wait.Wait)

	// The permit in the moved slot, and the lease elsewhere, outlive their
	// TTL twice over: renewed on the slot's new primary.
	for _, l := range []struct {
		name    string
		expires time.Time
	}{{name, kaSem.ExpiresAt}, {name + "-ka", ka.ExpiresAt}} {
		end := l.expires.Add(2 * kaTTL).UnixMilli()
		eventually(t, time.Minute, "the Redis clock passes "+l.name+"'s expiry twice over", func() bool {
			return redisNowMS(t, rdb, "{"+l.name+"}") > end
		})
	}
	if st, err := b.InspectSemaphore(ctx, name, kaSem.Token); err != nil || !st.Owned {
		t.Errorf("the keep-alive permit in the moved slot: owned %v (%v), want renewed and held", st.Owned, err)
	}
	if st, err := b.Inspect(ctx, name+"-ka", ka.Token); err != nil || !st.Owned {
		t.Errorf("the keep-alive lease: owned %v (%v), want renewed and held", st.Owned, err)
	}
}

// moveSlot moves slot, with its keys, from its primary to another one, as
// redis-cli --cluster reshard does (IMPORTING, MIGRATING, MIGRATE, SETSLOT
// NODE), and returns the new primary.
func moveSlot(t *testing.T, rdb *redis.ClusterClient, slot int) *redis.Client {
	t.Helper()
	ctx := t.Context()
	src, err := rdb.MasterForKey(ctx, "{"+locks.SlotTag(slot)+"}")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex // ForEachMaster calls fn on every primary at once
		masters []*redis.Client
	)
	err = rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var dst *redis.Client
	for _, m := range masters {
		if m.Options().Addr != src.Options().Addr {
			dst = m
			break
		}
	}
	srcID, err := src.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	dstID, err := dst.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	must := func(c *redis.Client, args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%s %v: %v", c.Options().Addr, args, err)
		}
	}
	must(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	must(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	host, port, err := net.SplitHostPort(dst.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(src, args...)
	}
	for _, m := range masters {
		must(m, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	}
	rdb.ReloadState(ctx)
	return dst
}
