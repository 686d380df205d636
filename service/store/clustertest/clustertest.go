// Package clustertest starts a Redis Cluster of three primaries and three
// replicas (.ci/redis-cluster.sh) once per test package, for tests that
// need a real cluster.
//
// A package calls Shared from its tests, and Main from its TestMain, which
// stops the cluster after the tests. Tests skip when redis-server or redis-cli is not on the PATH,
// unless LATCHKEY_REQUIRE_REDIS=1 (CI), which fails them instead.
package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a running cluster.
type Cluster struct {
	// URL is the seed URL, go-redis's cluster form:
	// redis://127.0.0.1:P?addr=127.0.0.1:P+1&...
	URL string
	dir string
}

var (
	once    sync.Once
	shared  *Cluster
	started error
)

// Shared returns the package's cluster, starting it on the first call on
// ports basePort..basePort+5 (and their cluster bus ports, 10000 above).
// It skips t when redis-server or redis-cli is missing (fails it with
// LATCHKEY_REQUIRE_REDIS=1) and fails it when the cluster cannot start.
func Shared(t testing.TB, basePort int) *Cluster {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("LATCHKEY_REQUIRE_REDIS") == "1" {
				t.Fatalf("%s is not on the PATH, and LATCHKEY_REQUIRE_REDIS=1", bin)
			}
			t.Skipf("%s is not on the PATH (Debian: apt-get install redis-server); a Redis Cluster test needs it; "+
				"set LATCHKEY_REQUIRE_REDIS=1 to fail instead", bin)
		}
	}
	once.Do(func() { shared, started = start(basePort) })
	if started != nil {
		t.Fatalf("start a redis cluster on ports %d..%d: %v", basePort, basePort+5, started)
	}
	return shared
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
	if shared != nil {
		_ = exec.Command("bash", shared.script(), "stop", shared.dir).Run()
		_ = os.RemoveAll(shared.dir)
	}
}

func start(basePort int) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "latchkey-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", c.script(), "start", dir, fmt.Sprint(basePort)).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		_ = exec.Command("bash", c.script(), "stop", dir).Run()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("%v: %s", err, msg)
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	if len(lines) == 0 {
		return nil, fmt.Errorf("redis-cluster.sh printed no URL")
	}
	c.URL = lines[len(lines)-1]
	if err := c.waitReplicas(ctx); err != nil {
		_ = exec.Command("bash", c.script(), "stop", dir).Run()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// waitReplicas waits until every primary's replica is in sync (its link
// online) and every node's slot table lists all six nodes: only then does
// WAIT count the replica, and does a client see the replicas whichever node
// it asks (CLUSTER SLOTS leaves out a replica still in its first sync).
func (c *Cluster) waitReplicas(ctx context.Context) error {
	opts, err := redis.ParseClusterURL(c.URL)
	if err != nil {
		return err
	}
	for {
		if replicasReady(ctx, opts.Addrs) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the replicas did not come in sync: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func replicasReady(ctx context.Context, addrs []string) bool {
	for _, addr := range addrs {
		node := redis.NewClient(&redis.Options{Addr: addr})
		slots, err := node.ClusterSlots(ctx).Result()
		info, infoErr := node.Info(ctx, "replication").Result()
		_ = node.Close()
		if err != nil || infoErr != nil {
			return false
		}
		nodes := 0
		for _, s := range slots {
			nodes += len(s.Nodes)
		}
		if nodes != len(addrs) {
			return false
		}
		if strings.Contains(info, "role:master") && !strings.Contains(info, "state=online") {
			return false
		}
	}
	return true
}

// script is .ci/redis-cluster.sh of the module the test runs in.
func (c *Cluster) script() string {
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, ".ci", "redis-cluster.sh")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return filepath.Join(".ci", "redis-cluster.sh")
		}
		dir = parent
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
