package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/latchkey/latchkey/service/store/clustertest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// A URL naming one node of a cluster is detected and served through a
// cluster client; the seed-list form and -redis-cluster (or
// LATCHKEY_REDIS_CLUSTER=true) with one node are served so without asking.
// Each way the server is ready, grants leases, and makes rate-limit
// decisions on keys over every primary, each key counted exactly.
func TestRunOnARedisCluster(t *testing.T) {
	c := clustertest.Shared(t)
	c.Flush(t)
	node := "redis://" + c.Nodes[1].Addr
	for i, args := range [][]string{
		{"-redis-url", node},
		{"-redis-url", c.URL},
		{"-redis-url", node, "-redis-cluster"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			// Each decision may wait for the redis timeout, not the gateway's
			// 250ms: the first calls to each primary dial on a busy machine,
			// and this test is about where decisions go and their counts.
			s := startServer(t, append(args, "-ratelimit-timeout", "2s")...)
			if detected, _ := s.logs.find("redis is a cluster node (cluster_enabled:1): serving the cluster through it"); (detected != nil) != (i == 0) {
				t.Errorf("detection logged: %v, want %v; logs:\n%s", detected != nil, i == 0, s.logs)
			}
			if resp, ready := s.call(t, http.MethodGet, "/readyz", ""); resp.StatusCode != http.StatusOK {
				t.Errorf("/readyz = %d %v, want 200; logs:\n%s", resp.StatusCode, ready, s.logs)
			}
			for n := range 6 { // names on every primary
				path := fmt.Sprintf("/v1/locks/run-%d-lock-%d", i, n)
				if resp, l := s.call(t, http.MethodPost, path, `{"ttl":"1m"}`); resp.StatusCode != http.StatusCreated {
					t.Errorf("acquire %s = %d %v, want 201", path, resp.StatusCode, l)
				}
			}
			// Concurrent, so that decisions of many slots share a batch.
			var mu sync.Mutex
			allowed := map[string]int{}
			var wg sync.WaitGroup
			for k := range 30 * 3 {
				wg.Go(func() {
					key := fmt.Sprintf("run-%d-client-%d", i, k%30)
					resp, d := s.call(t, http.MethodPost, "/v1/ratelimit/check", `{"key":"`+key+`","limit":2,"window":"1h"}`)
					if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
						t.Errorf("decision for %s = %d %v, want 200 or 429", key, resp.StatusCode, d)
					}
					mu.Lock()
					defer mu.Unlock()
					if d["allowed"] == true {
						allowed[key]++
					}
				})
			}
			wg.Wait()
			for k := range 30 {
				if key := fmt.Sprintf("run-%d-client-%d", i, k); allowed[key] != 2 {
					t.Errorf("%s: %d allowed, want exactly 2", key, allowed[key])
				}
			}
		})
	}
}

// The environment forces cluster mode as the flag does; it cannot be
// combined with a Sentinel URL, nor used without a Redis URL.
func TestParseConfigRedisCluster(t *testing.T) {
	c, err := parseConfig(nil, env("LATCHKEY_REDIS_URL", "redis://node-1:6379", "LATCHKEY_REDIS_CLUSTER", "true"), &bytes.Buffer{})
	if err != nil || !c.RedisCluster {
		t.Errorf("LATCHKEY_REDIS_CLUSTER=true: cluster %v, %v; want true", c.RedisCluster, err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-redis-cluster"}, "-redis-cluster needs -redis-url"},
		{[]string{"-redis-cluster", "-redis-url", "redis://s:26379?master_name=m"}, "names a Sentinel master"},
	} {
		_, err := parseConfig(tt.args, env(), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseConfig(%q) = %v, want an error with %q", tt.args, err, tt.want)
		}
	}
}

// A cluster whose state is not ok (here one node with no slots: none is
// served) is not ready, and /readyz says so, with the cluster state in the
// log; once every slot is served the store and /readyz are ready (a failed
// check makes the client read the slots again).
func TestClusterNotReadyUntilItsStateIsOK(t *testing.T) {
	bin := redisServerBinary(t)
	port, _ := startRedisProcess(t, bin, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	url := "redis://" + addrOf(port)

	s := startServer(t, "-redis-url", url, "-redis-timeout", "2s")
	resp, ready := s.call(t, http.MethodGet, "/readyz", "")
	if resp.StatusCode != http.StatusServiceUnavailable || ready["status"] != "unavailable" {
		t.Errorf("/readyz on a cluster without slots = %d %v, want 503 unavailable", resp.StatusCode, ready)
	}
	if line, _ := s.logs.find("not ready"); line == nil || !strings.Contains(fmt.Sprint(line["err"]), "the redis cluster state is not ok") {
		t.Errorf("not-ready log line = %v, want the cluster state named; logs:\n%s", line, s.logs)
	}

	rdb, guard, err := openRedis(t.Context(), url, 2*time.Second, false, slog.New(slog.DiscardHandler))
	if err != nil || guard != nil {
		t.Fatalf("openRedis = %v, guard %v", err, guard)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(rdb, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Ready(t.Context()); !errors.Is(err, store.ErrClusterState) {
		t.Errorf("Ready on a cluster without slots = %v, want ErrClusterState", err)
	}
	node := redis.NewClient(&redis.Options{Addr: addrOf(port)})
	t.Cleanup(func() { _ = node.Close() })
	if err := node.Do(t.Context(), "cluster", "addslotsrange", 0, store.ClusterSlots-1).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node to serve every slot", func() bool {
		info, err := node.ClusterInfo(t.Context()).Result()
		return err == nil && store.ClusterState(info) == "ok"
	})
	waitFor(t, "the store to be ready", func() bool { return st.Ready(t.Context()) == nil })
	waitFor(t, "/readyz to say ready", func() bool {
		resp, _ := s.call(t, http.MethodGet, "/readyz", "")
		return resp.StatusCode == http.StatusOK
	})
}

// A node Latchkey could not ask at start is asked again by /readyz until
// it answers: a cluster node is then never ready (its lock scripts would
// fail), a single node is, and asking stops.
func TestClusterGuard(t *testing.T) {
	c := clustertest.Shared(t)
	bin := redisServerBinary(t)
	single, _ := startRedisProcess(t, bin)
	for _, tt := range []struct {
		url  string
		want error
	}{
		{"redis://" + c.Nodes[0].Addr, errClusterLate},
		{"redis://" + addrOf(single), nil},
	} {
		rdb := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(tt.url, "redis://")})
		t.Cleanup(func() { _ = rdb.Close() })
		g := &clusterGuard{rdb: rdb, timeout: 2 * time.Second}
		if err := g.check(t.Context()); !errors.Is(err, tt.want) || g.verified.Load() != (tt.want == nil) {
			t.Errorf("%s: check = %v, verified %v; want %v", tt.url, err, g.verified.Load(), tt.want)
		}
	}
	down := redis.NewClient(&redis.Options{Addr: addrOf(freePort(t)), MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	g := &clusterGuard{rdb: down, timeout: time.Second}
	if err := g.check(t.Context()); !errors.Is(err, store.ErrUnavailable) || g.verified.Load() {
		t.Errorf("check with redis down = %v, verified %v; want ErrUnavailable, not verified", err, g.verified.Load())
	}
}
