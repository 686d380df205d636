package integration

// The harness on a Redis Cluster: LATCHKEY_TEST_STORE=cluster runs the same
// tests on one cluster of three primaries and three replicas, started once
// for the package from .ci/redis-cluster.sh (or the one at
// LATCHKEY_TEST_REDIS_CLUSTER_URL), and stopped when the package ends.
// Tests named TestCluster... start clusters of their own
// whatever the pass, and CI's cluster pass leaves them out.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// envStore "cluster": every test that runs on a Redis Cluster runs on
	// one; the single-node-only ones (singleNodeOnly) skip.
	envStore = "LATCHKEY_TEST_STORE"
	// envClusterURL is a running cluster's seed URL for the cluster pass,
	// instead of starting one.
	envClusterURL = "LATCHKEY_TEST_REDIS_CLUSTER_URL"
	// clusterScript starts and stops a cluster (relative to this package).
	clusterScript = "../.ci/redis-cluster.sh"
)

// onCluster says the tests run on a Redis Cluster (LATCHKEY_TEST_STORE=cluster).
func onCluster() bool { return os.Getenv(envStore) == "cluster" }

// redisCluster is a cluster of redis-server processes started by
// clusterScript in dir, on ports base..base+5.
type redisCluster struct {
	URL  string
	Base int
	dir  string
}

// Ports are the client ports of the cluster's six nodes.
func (c *redisCluster) Ports() []int {
	ps := make([]int, 6)
	for i := range ps {
		ps[i] = c.Base + i
	}
	return ps
}

// startCluster starts a cluster in a new directory under parent, on six
// free ports (and their cluster bus ports, +10000). The error says why it
// could not (no redis-server, a port taken, the script failed).
func startCluster(ctx context.Context, parent string) (*redisCluster, error) {
	for _, tool := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s is not installed (apt-get install redis-server redis-tools): %w", tool, err)
		}
	}
	dir, err := os.MkdirTemp(parent, "cluster-")
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 {
		base, err := freeClusterBase()
		if err != nil {
			return nil, err
		}
		c := &redisCluster{Base: base, dir: dir}
		out, err := exec.CommandContext(ctx, "bash", clusterScript, "start", dir, strconv.Itoa(base)).Output()
		if err == nil {
			c.URL = strings.TrimSpace(string(out))
			return c, nil
		}
		c.stop()
		last = fmt.Errorf("%s start %s %d: %w: %s", clusterScript, dir, base, err, stderrOf(err))
	}
	return nil, last
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// stop kills the cluster's processes and removes its directory.
func (c *redisCluster) stop() {
	_ = exec.Command("bash", clusterScript, "stop", c.dir).Run()
	// A node killed with SIGTERM may still be writing its log: retry.
	for range 50 {
		if os.RemoveAll(c.dir) == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// forget removes the pid file of the node at addr (127.0.0.1:port), which
// the test killed, so that stop signals only processes of the cluster.
func (c *redisCluster) forget(addr string) {
	_, port, _ := strings.Cut(addr, ":")
	_ = os.Remove(filepath.Join(c.dir, port, "redis.pid"))
}

// freeClusterBase picks a base port such that base..base+5 and their bus
// ports base+10000.. are free on 127.0.0.1 now.
func freeClusterBase() (int, error) {
	for range 100 {
		base := 20000 + rand.IntN(9000)
		ok := true
		for i := range 6 {
			for _, p := range []int{base + i, base + i + 10000} {
				ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
				if err != nil {
					ok = false
					break
				}
				_ = ln.Close()
			}
		}
		if ok {
			return base, nil
		}
	}
	return 0, errors.New("no six free ports for a cluster")
}

// newOwnCluster starts a cluster for t alone (for tests that kill or
// reshard nodes), stopped when t ends; it skips, or fails when Redis is
// required, when none can be started.
func newOwnCluster(t testing.TB) *redisCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := startCluster(ctx, t.TempDir())
	if err != nil {
		skipOrFail(t, "cannot start a Redis Cluster: "+err.Error())
	}
	t.Cleanup(c.stop)
	return c
}

// sharedCluster is the package's cluster in the cluster pass: started by
// the first test that asks, stopped by TestMain.
var sharedCluster struct {
	once sync.Once
	c    *redisCluster
	url  string
	err  error
}

// clusterURL is the seed URL of the package's cluster, started on first use.
func clusterURL(t testing.TB) string {
	t.Helper()
	sharedCluster.once.Do(func() {
		if url := os.Getenv(envClusterURL); url != "" {
			sharedCluster.url = url
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sharedCluster.c, sharedCluster.err = startCluster(ctx, "")
		if sharedCluster.err == nil {
			sharedCluster.url = sharedCluster.c.URL
		}
	})
	if sharedCluster.err != nil {
		skipOrFail(t, "cannot start a Redis Cluster: "+sharedCluster.err.Error())
	}
	return sharedCluster.url
}

// stopSharedCluster stops the package's cluster, if it started one.
func stopSharedCluster() {
	if sharedCluster.c != nil {
		sharedCluster.c.stop()
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
// no automatic resend.
func clusterServerClient(t testing.TB, seed *redis.ClusterOptions, timeout time.Duration) *redis.ClusterClient {
	t.Helper()
	opts := &redis.ClusterOptions{Addrs: seed.Addrs, Username: seed.Username, Password: seed.Password, TLSConfig: seed.TLSConfig}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = timeout, timeout, timeout, timeout
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
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
