package clustertest

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A range is free only when all six ports and all six bus ports are.
func TestPortsFreeSeesEveryPortAndBusPort(t *testing.T) {
	base, err := freeBase()
	if err != nil {
		t.Fatal(err)
	}
	for _, taken := range []int{base, base + nodes - 1, base + busOffset, base + nodes - 1 + busOffset} {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(taken))
		if err != nil {
			t.Skipf("port %d was taken meanwhile: %v", taken, err)
		}
		if portsFree(base) {
			t.Errorf("portsFree(%d) = true with %d taken", base, taken)
		}
		_ = ln.Close()
	}
}

// Two private clusters run at once on different ports; a node killed is
// gone, and restarted it rejoins its cluster, every node ok again.
func TestStartKillRestart(t *testing.T) {
	a, b := Start(t), Start(t)
	ports := map[string]bool{}
	for _, n := range append(append([]Node(nil), a.Nodes...), b.Nodes...) {
		if ports[n.Addr] {
			t.Fatalf("node %s in both clusters", n.Addr)
		}
		ports[n.Addr] = true
	}
	victim := a.Nodes[len(a.Nodes)-1]
	rdb := redis.NewClient(&redis.Options{Addr: victim.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	pid := a.Kill(t, victim.Addr)
	waitFor(t, victim.Addr+" stops answering", func(ctx context.Context) bool { return rdb.Ping(ctx).Err() != nil })
	if _, err := victim.PID(); err == nil {
		t.Errorf("node %s (pid %d) still has a pid file after Kill", victim.Addr, pid)
	}
	a.Restart(t, victim.Addr)
	if again, err := victim.PID(); err != nil || again == pid {
		t.Errorf("PID after Restart = %d, %v; want a new process", again, err)
	}
	waitFor(t, "every node of the restarted cluster ok with six nodes", func(ctx context.Context) bool {
		for _, n := range a.Nodes {
			c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
			info, err := c.ClusterInfo(ctx).Result()
			_ = c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:6") {
				return false
			}
		}
		return true
	})
}

// waitFor polls cond until it holds, failing t after a minute.
func waitFor(t *testing.T, what string, cond func(context.Context) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for !cond(ctx) {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within a minute", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
