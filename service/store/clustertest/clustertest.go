// Package clustertest starts Redis Clusters of three primaries and three
// replicas (.ci/redis-cluster.sh) on free ports of 127.0.0.1, for tests that
// need a real cluster; only tests import it.
//
// Shared is one cluster per test package, started by the first test that
// asks (or the running one at LATCHKEY_TEST_REDIS_CLUSTER_URL) and stopped
// by Stop from the package's TestMain (Main does both). Start is a cluster
// for one test alone, stopped when the test ends: for tests that kill,
// restart or reshard nodes. Tests skip when redis-server or redis-cli is not
// on the PATH, unless LATCHKEY_REQUIRE_REDIS=1 (CI), which fails them
// instead; a cluster that cannot start fails them.
package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvURL is a running cluster's seed URL; Shared uses it instead of
// starting one.
const EnvURL = "LATCHKEY_TEST_REDIS_CLUSTER_URL"

// envRequire=1 turns a skip for a missing redis-server into a failure.
const envRequire = "LATCHKEY_REQUIRE_REDIS"

// startTimeout bounds the start of one cluster, retries included.
const startTimeout = 3 * time.Minute

// Cluster is a running cluster.
type Cluster struct {
	// URL is the seed URL, go-redis's cluster form:
	// redis://127.0.0.1:P?addr=127.0.0.1:P+1&...
	URL string
	// Nodes are the six nodes, in port order. Their Dir is empty on a
	// cluster this package did not start (LATCHKEY_TEST_REDIS_CLUSTER_URL).
	Nodes []Node
	dir   string // "" when this package did not start it
}

var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Missing says why no cluster can be started here ("" when one can): a
// redis-server or redis-cli not on the PATH.
func Missing() string {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return bin + " is not on the PATH (Debian: apt-get install redis-server redis-tools); a Redis Cluster test needs it"
		}
	}
	return ""
}

// skipIfMissing skips t when Missing says so, or fails it when
// LATCHKEY_REQUIRE_REDIS=1.
func skipIfMissing(t testing.TB) {
	t.Helper()
	why := Missing()
	if why == "" {
		return
	}
	if os.Getenv(envRequire) == "1" {
		t.Fatalf("%s, and %s=1", why, envRequire)
	}
	t.Skipf("%s; set %s=1 to fail instead", why, envRequire)
}

// Shared returns the package's cluster: the one at
// LATCHKEY_TEST_REDIS_CLUSTER_URL if set, else one started on the first
// call on free ports. It skips t when redis-server or redis-cli is missing
// (fails it with LATCHKEY_REQUIRE_REDIS=1) and fails it when the cluster
// cannot start.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	url := os.Getenv(EnvURL)
	if url == "" {
		skipIfMissing(t)
	}
	shared.once.Do(func() {
		if url != "" {
			shared.c, shared.err = external(url)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		shared.c, shared.err = start(ctx)
	})
	if shared.err != nil {
		t.Fatalf("start the package's redis cluster: %v", shared.err)
	}
	return shared.c
}

// Start starts a cluster for t alone on free ports, stopped when t ends.
// It skips t when redis-server or redis-cli is missing (fails it with
// LATCHKEY_REQUIRE_REDIS=1) and fails it when the cluster cannot start.
func Start(t testing.TB) *Cluster {
	t.Helper()
	skipIfMissing(t)
	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	c, err := start(ctx)
	if err != nil {
		t.Fatalf("start a redis cluster: %v", err)
	}
	t.Cleanup(c.stop)
	return c
}

// Main runs a package's tests, stops the package's cluster and exits:
//
//	func TestMain(m *testing.M) { clustertest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the package's cluster, if Shared started one.
func Stop() {
	if shared.c != nil {
		shared.c.stop()
	}
}

// Client returns a cluster client on c, closed when t ends: no retries,
// bounded calls, as the server's.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	opts, err := redis.ParseClusterURL(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries = -1
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Flush empties every primary, so a test starts on an empty keyspace
// (FLUSHALL; the scripts stay loaded).
func (c *Cluster) Flush(t testing.TB) {
	t.Helper()
	rdb := c.Client(t)
	err := rdb.ForEachMaster(t.Context(), func(ctx context.Context, n *redis.Client) error {
		return n.FlushAll(ctx).Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// external is the running cluster at url, whose nodes are the seed URL's.
func external(url string) (*Cluster, error) {
	opts, err := redis.ParseClusterURL(url)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvURL, err)
	}
	c := &Cluster{URL: url}
	for _, addr := range opts.Addrs {
		c.Nodes = append(c.Nodes, Node{Addr: addr})
	}
	return c, nil
}
