package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// lockCluster is a Redis Cluster of three primaries and three replicas
// for one test (newOwnCluster), with lock services on clients of its own.
type lockCluster struct{ *redisCluster }

// startLockCluster starts a cluster for t alone, stopped when t ends; it
// skips, or fails when Redis is required, when none can be started.
func startLockCluster(t *testing.T) *lockCluster { return &lockCluster{newOwnCluster(t)} }

// client returns a cluster client on c configured as cmd/server would.
func (c *lockCluster) client(t *testing.T) *redis.ClusterClient {
	t.Helper()
	opts, err := redis.ParseClusterURL(c.URL)
	if err != nil {
		t.Fatalf("parse %s: %v", c.URL, err)
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// service returns a lock service on a cluster client of its own, as the
// integration harness builds one (store.Config.Cluster set), its scripts
// loaded on every primary.
func (c *lockCluster) service(t *testing.T, prefix string, cfg locks.Config) *locks.Service {
	t.Helper()
	st, err := store.New(c.client(t), store.Config{KeyPrefix: prefix, Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := locks.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatalf("load scripts: %v", err)
	}
	return svc
}

// namesOnEverySlotRange returns n lock names whose slots are spread over
// the whole slot range (every primary of a three-primary cluster gets about
// a third).
func namesOnEverySlotRange(prefix string, n int) []string {
	names := make([]string, 0, n)
	step := store.ClusterSlots / n
	next := 0
	for i := 0; len(names) < n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if s := store.Slot(name); s >= next && s < next+step {
			names = append(names, name)
			next += step
		}
	}
	return names
}

// redisNowMS is the Redis clock of the node serving key.
func redisNowMS(t *testing.T, rdb *redis.ClusterClient, key string) int64 {
	t.Helper()
	node, err := rdb.MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	now, err := node.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}
