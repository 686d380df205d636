package integration

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// TestClusterLocks runs the lock primitives on a real Redis Cluster (three
// primaries, three replicas) with two lock services, each on a cluster
// client of its own, as two Latchkey instances.
func TestClusterLocks(t *testing.T) {
	c := startLockCluster(t)
	cfg := locks.Config{RenewPoll: 20 * time.Millisecond}
	const prefix = "lkc:"
	a, b := c.service(t, prefix, cfg), c.service(t, prefix, cfg)
	rdb := c.client(t)

	t.Run("keep-alive leases on every slot range are renewed by both instances", func(t *testing.T) {
		testClusterKeepalive(t, a, b, rdb, prefix)
	})
	t.Run("a waiter is woken by a release on another instance", func(t *testing.T) {
		testClusterWakeUps(t, a, b, rdb, prefix)
	})
}

// testClusterKeepalive: 150 keep-alive leases (exclusive locks, read
// leases, semaphore permits) on names spread over every slot, taken half on
// each instance, outlive several TTLs: each was renewed, none lost, and
// once released the directory of registry shards empties. The directory is
// deleted before the renewers start, as a failover of its node may lose
// it: their reconciliation finds every shard again.
func testClusterKeepalive(t *testing.T, a, b *locks.Service, rdb *redis.ClusterClient, prefix string) {
	const ttl = 2 * time.Second
	req := locks.AcquireRequest{TTL: ttl, Keepalive: true, MaxHold: time.Hour}
	type held struct {
		kind, name, token string
		expires           time.Time
	}
	var leases []held
	for i, name := range namesOnEverySlotRange("ka", 150) {
		s := []*locks.Service{a, b}[i%2]
		switch i % 3 {
		case 0:
			l, err := s.Acquire(t.Context(), name, req)
			if err != nil {
				t.Fatalf("acquire %s: %v", name, err)
			}
			leases = append(leases, held{"lock", name, l.Token, l.ExpiresAt})
		case 1:
			r := req
			r.Mode = locks.ModeRead
			l, err := s.AcquireRW(t.Context(), name, r)
			if err != nil {
				t.Fatalf("acquire read %s: %v", name, err)
			}
			leases = append(leases, held{"rw", name, l.Token, l.ExpiresAt})
		default:
			l, err := s.AcquireSemaphore(t.Context(), name, locks.SemaphoreRequest{AcquireRequest: req, Permits: 2, Count: 1})
			if err != nil {
				t.Fatalf("acquire permit %s: %v", name, err)
			}
			leases = append(leases, held{"sem", name, l.Token, l.ExpiresAt})
		}
	}
	dir := prefix + "keepalive:slots:{keepalive}"
	slots := map[int]bool{}
	for _, l := range leases {
		slots[store.Slot(l.name)] = true
	}
	eventually(t, time.Minute, "every grant marked its shard's slot in the directory", func() bool {
		n, err := rdb.ZCard(t.Context(), dir).Result()
		return err == nil && n == int64(len(slots))
	})
	if err := rdb.Del(t.Context(), dir).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, s := range []*locks.Service{a, b} {
		wg.Go(func() { s.RunRenewer(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	// Every lease would have run out twice over without renewals: wait on
	// the Redis clock of every lease's node, not on this process's.
	for _, l := range leases {
		end := l.expires.Add(2 * ttl).UnixMilli()
		eventually(t, time.Minute, "the Redis clock passes "+l.name+"'s expiry twice over", func() bool {
			return redisNowMS(t, rdb, "{"+l.name+"}") > end
		})
	}
	for _, l := range leases {
		var owned bool
		var lost string
		switch l.kind {
		case "lock":
			st, err := a.Inspect(t.Context(), l.name, l.token)
			if err != nil {
				t.Fatal(err)
			}
			owned, lost = st.Owned, st.LostReason
		case "rw":
			st, err := b.InspectRW(t.Context(), l.name, l.token)
			if err != nil {
				t.Fatal(err)
			}
			owned, lost = st.Owned, st.LostReason
		default:
			st, err := a.InspectSemaphore(t.Context(), l.name, l.token)
			if err != nil {
				t.Fatal(err)
			}
			owned = st.Owned
		}
		if !owned {
			t.Errorf("%s %s: the lease is gone (lost reason %q): it was not renewed", l.kind, l.name, lost)
		}
	}
	for _, l := range leases {
		var err error
		switch l.kind {
		case "lock":
			_, err = b.Release(t.Context(), l.name, l.token)
		case "rw":
			_, err = a.ReleaseRW(t.Context(), l.name, l.token, locks.ModeRead)
		default:
			_, err = b.ReleaseSemaphore(t.Context(), l.name, l.token)
		}
		if err != nil {
			t.Errorf("release %s %s: %v", l.kind, l.name, err)
		}
	}
	eventually(t, time.Minute, "the directory of registry shards empties once every lease is released", func() bool {
		n, err := rdb.ZCard(t.Context(), dir).Result()
		return err == nil && n == 0
	})
}

// testClusterWakeUps: for an exclusive lock, a read/write lock and a
// semaphore on each of the three primaries, a waiter on one instance gets
// the lock once the holder on the other releases it, and long before its
// wait (a minute) would end (the holder's TTL, two minutes, is further
// still): only the wake-up, sent with SPUBLISH and heard on a sharded
// subscription (PUBSUB SHARDNUMSUB counts it), lets it in then; without it
// the waiter would take the lock at the end of its wait.
func testClusterWakeUps(t *testing.T, a, b *locks.Service, rdb *redis.ClusterClient, prefix string) {
	hold := locks.AcquireRequest{TTL: 2 * time.Minute}
	wait := locks.AcquireRequest{TTL: time.Minute, Wait: time.Minute}
	for _, name := range namesOnEverySlotRange("wake", 3) {
		t.Run("lock "+name, func(t *testing.T) {
			l, err := a.Acquire(t.Context(), name, hold)
			if err != nil {
				t.Fatal(err)
			}
			start := redisNowMS(t, rdb, "{"+name+"}")
			got := goAcquire(func() (time.Time, error) {
				l, err := b.Acquire(t.Context(), name, wait)
				return l.ExpiresAt.Add(-l.TTL), err
			})
			waitShardSubscribed(t, rdb, locks.KeysOf(prefix, name).Channel)
			eventually(t, 10*time.Second, "the waiter is registered", func() bool {
				st, err := a.Inspect(t.Context(), name, "")
				return err == nil && st.Waiters == 1
			})
			if _, err := a.Release(t.Context(), name, l.Token); err != nil {
				t.Fatal(err)
			}
			wokenBeforeTheWaitEnded(t, got, start, wait.Wait)
		})
		t.Run("rwlock "+name, func(t *testing.T) {
			w := hold
			w.Mode = locks.ModeWrite
			l, err := a.AcquireRW(t.Context(), name, w)
			if err != nil {
				t.Fatal(err)
			}
			r := wait
			r.Mode = locks.ModeRead
			start := redisNowMS(t, rdb, "{"+name+"}")
			got := goAcquire(func() (time.Time, error) {
				l, err := b.AcquireRW(t.Context(), name, r)
				return l.ExpiresAt.Add(-l.TTL), err
			})
			waitShardSubscribed(t, rdb, prefix+"rw:unlock:{"+name+"}")
			eventually(t, 10*time.Second, "the reader waits", func() bool {
				st, err := a.InspectRW(t.Context(), name, "")
				return err == nil && st.WaitingReaders == 1
			})
			if _, err := a.ReleaseRW(t.Context(), name, l.Token, locks.ModeWrite); err != nil {
				t.Fatal(err)
			}
			wokenBeforeTheWaitEnded(t, got, start, wait.Wait)
		})
		t.Run("semaphore "+name, func(t *testing.T) {
			l, err := a.AcquireSemaphore(t.Context(), name, locks.SemaphoreRequest{AcquireRequest: hold, Permits: 1, Count: 1})
			if err != nil {
				t.Fatal(err)
			}
			start := redisNowMS(t, rdb, "{"+name+"}")
			got := goAcquire(func() (time.Time, error) {
				l, err := b.AcquireSemaphore(t.Context(), name, locks.SemaphoreRequest{AcquireRequest: wait, Permits: 1, Count: 1})
				return l.ExpiresAt.Add(-l.TTL), err
			})
			waitShardSubscribed(t, rdb, prefix+"sem:unlock:{"+name+"}")
			eventually(t, 10*time.Second, "the permit waiter waits", func() bool {
				st, err := a.InspectSemaphore(t.Context(), name, "")
				return err == nil && st.Waiters == 1
			})
			if _, err := a.ReleaseSemaphore(t.Context(), name, l.Token); err != nil {
				t.Fatal(err)
			}
			wokenBeforeTheWaitEnded(t, got, start, wait.Wait)
		})
	}
}

// grant is an acquire's outcome: when it was granted (Redis clock), or why
// not.
type grant struct {
	at  time.Time
	err error
}

// goAcquire runs acquire on a goroutine and delivers its outcome.
func goAcquire(acquire func() (time.Time, error)) <-chan grant {
	got := make(chan grant, 1)
	go func() {
		at, err := acquire()
		got <- grant{at, err}
	}()
	return got
}

// wokenBeforeTheWaitEnded checks that the waiter whose outcome got
// delivers, which started waiting after startMS (Redis clock) for wait, was
// granted in the first half of its wait: woken by the release, not taking
// the lock in its last attempt when the wait ended.
func wokenBeforeTheWaitEnded(t *testing.T, got <-chan grant, startMS int64, wait time.Duration) {
	t.Helper()
	g := <-got
	if g.err != nil {
		t.Fatalf("the waiter did not get the lock after the release: %v", g.err)
	}
	if half := time.UnixMilli(startMS).Add(wait / 2); !g.at.Before(half) {
		t.Fatalf("the waiter was granted at %s, not before %s: no wake-up reached it, its wait ran out", g.at, half)
	}
}

// waitShardSubscribed waits until the primary of channel's slot counts a
// sharded subscriber on it, and checks that no node has a classic one.
func waitShardSubscribed(t *testing.T, rdb *redis.ClusterClient, channel string) {
	t.Helper()
	node, err := rdb.MasterForKey(t.Context(), channel)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, channel+" has a sharded subscriber on its primary", func() bool {
		n, err := node.PubSubShardNumSub(t.Context(), channel).Result()
		return err == nil && n[channel] == 1
	})
	err = rdb.ForEachShard(t.Context(), func(ctx context.Context, c *redis.Client) error {
		n, err := c.PubSubNumSub(ctx, channel).Result()
		if err == nil && n[channel] != 0 {
			return errors.New(c.Options().Addr + " has a SUBSCRIBE on " + channel)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
}
