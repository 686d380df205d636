package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// lockCluster is a Redis Cluster of three primaries and three replicas
// started from redis-server processes by .ci/redis-cluster.sh for one test.
type lockCluster struct {
	url   string
	ports []int
}

// startLockCluster starts a cluster on six free loopback ports and stops it
// when t ends. It skips when redis-server or redis-cli is missing, unless
// LATCHKEY_REQUIRE_REDIS=1.
func startLockCluster(t *testing.T) *lockCluster {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv(envRequireRedis) == "1" {
				t.Fatalf("%s is not installed, and %s=1", bin, envRequireRedis)
			}
			t.Skipf("a Redis Cluster test needs %s on PATH (set %s=1 to fail instead)", bin, envRequireRedis)
		}
	}
	base := freeClusterPorts(t)
	dir := t.TempDir()
	script, err := filepath.Abs("../.ci/redis-cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() { _ = exec.Command("bash", script, "stop", dir).Run() })
	out, err := exec.CommandContext(ctx, "bash", script, "start", dir, strconv.Itoa(base)).Output()
	if err != nil {
		t.Fatalf("start a cluster on %d: %v\n%s", base, err, out)
	}
	c := &lockCluster{url: strings.TrimSpace(string(out))}
	for i := range 6 {
		c.ports = append(c.ports, base+i)
	}
	return c
}

// freeClusterPorts finds six consecutive loopback ports, and their cluster
// bus ports (+10000), that nothing listens on, from
// LATCHKEY_TEST_CLUSTER_PORT (default 22000) up.
func freeClusterPorts(t *testing.T) int {
	t.Helper()
	start := 22000
	if v, err := strconv.Atoi(os.Getenv("LATCHKEY_TEST_CLUSTER_PORT")); err == nil && v > 0 {
		start = v
	}
	for base := start; base < start+500; base += 10 {
		free := true
		var ls []net.Listener
		for i := range 6 {
			for _, p := range []int{base + i, base + i + 10000} {
				l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
				if err != nil {
					free = false
					break
				}
				ls = append(ls, l)
			}
		}
		for _, l := range ls {
			_ = l.Close()
		}
		if free {
			return base
		}
	}
	t.Fatalf("no six free ports from %d", start)
	return 0
}

// client returns a cluster client on c configured as cmd/server would.
func (c *lockCluster) client(t *testing.T) *redis.ClusterClient {
	t.Helper()
	opts, err := redis.ParseClusterURL(c.url)
	if err != nil {
		t.Fatalf("parse %s: %v", c.url, err)
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
