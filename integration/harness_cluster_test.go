package integration

// The harness on a Redis Cluster: LATCHKEY_TEST_STORE=cluster runs the same
// tests on one cluster of three primaries and three replicas, started once
// for the package by clustertest (or the one at
// LATCHKEY_TEST_REDIS_CLUSTER_URL), and stopped when the package ends.
// Tests named TestCluster... start clusters of their own
// whatever the pass, and CI's cluster pass leaves them out.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/latchkey/latchkey/service/store/clustertest"
	"github.com/redis/go-redis/v9"
)

// envStore "cluster": every test that runs on a Redis Cluster runs on
// one; the single-node-only ones (singleNodeOnly) skip.
const envStore = "LATCHKEY_TEST_STORE"

// onCluster says the tests run on a Redis Cluster (LATCHKEY_TEST_STORE=cluster).
func onCluster() bool { return os.Getenv(envStore) == "cluster" }

// clusterURL is the seed URL of the package's cluster (clustertest.Shared,
// stopped by TestMain), started on first use unless
// LATCHKEY_TEST_REDIS_CLUSTER_URL names a running one.
func clusterURL(t testing.TB) string {
	t.Helper()
	if os.Getenv(clustertest.EnvURL) == "" {
		skipIfNoCluster(t)
	}
	return clustertest.Shared(t).URL
}

// ownCluster starts a cluster for t alone (for tests that kill or reshard
// nodes) on free ports, stopped when t ends.
func ownCluster(t testing.TB) *clustertest.Cluster {
	t.Helper()
	skipIfNoCluster(t)
	return clustertest.Start(t)
}

// skipIfNoCluster skips t, or fails it when Redis is required, when no
// cluster can be started here.
func skipIfNoCluster(t testing.TB) {
	t.Helper()
	if why := clustertest.Missing(); why != "" {
		skipOrFail(t, "cannot start a Redis Cluster: "+why)
	}
}

// newClusterClient returns a cluster client on the seed URL, closed when t
// ends: the test's own handle, with go-redis's default retries.
func newClusterClient(t testing.TB, url string) *redis.ClusterClient {
	t.Helper()
	opts, err := redis.ParseClusterURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// clusterServerClient returns a cluster client on the nodes of seed (a
// test's own client's options), configured as cmd/server configures its
// own: every bound the Redis timeout, request deadlines reach the socket,
// no automatic resend (store.NewClusterNodeClient).
func clusterServerClient(t testing.TB, seed *redis.ClusterOptions, timeout time.Duration) *redis.ClusterClient {
	t.Helper()
	opts := &redis.ClusterOptions{Addrs: seed.Addrs, Username: seed.Username, Password: seed.Password, TLSConfig: seed.TLSConfig}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = timeout, timeout, timeout, timeout
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	opts.NewClient = store.NewClusterNodeClient
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// forEachPrimary calls fn with a client on every primary: the one node of a
// single Redis, every master of a cluster.
func forEachPrimary(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	default:
		return fmt.Errorf("forEachPrimary: unexpected client %T", rdb)
	}
}

// forEachNode calls fn with a client on every node: primaries and replicas.
func forEachNode(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachShard(ctx, fn)
	}
	return forEachPrimary(ctx, rdb, fn)
}

// allKeys is KEYS pattern on every primary.
func allKeys(t testing.TB, rdb redis.UniversalClient, pattern string) []string {
	t.Helper()
	var mu sync.Mutex
	var keys []string
	err := forEachPrimary(t.Context(), rdb, func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, pattern).Result()
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatalf("KEYS %s: %v", pattern, err)
	}
	return keys
}

// subscribers counts the subscriptions to each channel on every node:
// PUBSUB NUMSUB (SUBSCRIBE) plus PUBSUB SHARDNUMSUB (SSUBSCRIBE), as a
// channel is used one way or the other.
func subscribers(t testing.TB, rdb redis.UniversalClient, channels ...string) map[string]int64 {
	t.Helper()
	var mu sync.Mutex
	n := make(map[string]int64, len(channels))
	err := forEachNode(t.Context(), rdb, func(ctx context.Context, c *redis.Client) error {
		plain, err := c.PubSubNumSub(ctx, channels...).Result()
		if err != nil {
			return err
		}
		sharded, err := c.PubSubShardNumSub(ctx, channels...).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, ch := range channels {
			n[ch] += plain[ch] + sharded[ch]
		}
		return nil
	})
	if err != nil {
		t.Fatalf("PUBSUB NUMSUB/SHARDNUMSUB: %v", err)
	}
	return n
}
