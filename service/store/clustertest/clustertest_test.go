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

// A primary down, its replica too (so it is never replaced), leaves the
// other primaries serving their own slots: the nodes run with
// cluster-require-full-coverage no, as the README's cluster section says.
// With the default (yes) every node answers CLUSTERDOWN once one
// primary's slots have failed.
func TestAPrimaryDownLeavesTheOthersServing(t *testing.T) {
	c := Start(t)
	ctx := t.Context()
	seed := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = seed.Close() })
	slots, err := seed.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	victim := slots[0]
	if len(victim.Nodes) != 2 {
		t.Fatalf("slots %d-%d served by %v, want a primary and a replica", victim.Start, victim.End, victim.Nodes)
	}
	var survivor string
	var ranges [][2]int64
	for _, s := range slots {
		if s.Nodes[0].Addr == victim.Nodes[0].Addr {
			continue
		}
		if survivor == "" {
			survivor = s.Nodes[0].Addr
		}
		if s.Nodes[0].Addr == survivor {
			ranges = append(ranges, [2]int64{int64(s.Start), int64(s.End)})
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: survivor, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	key := ""
	for i := 0; key == ""; i++ {
		k := "k" + strconv.Itoa(i)
		slot, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range ranges {
			if r[0] <= slot && slot <= r[1] {
				key = k
			}
		}
	}

	for _, n := range victim.Nodes {
		c.Kill(t, n.Addr)
	}
	waitFor(t, survivor+" sees the killed primary's slots failed", func(ctx context.Context) bool {
		info, err := rdb.ClusterInfo(ctx).Result()
		return err == nil && !strings.Contains(info, "cluster_slots_fail:0\r")
	})
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("SET %s on %s, another primary down: %v; want it served", key, survivor, err)
	}
	if got, err := rdb.ConfigGet(ctx, "cluster-require-full-coverage").Result(); err != nil || got["cluster-require-full-coverage"] != "no" {
		t.Errorf("cluster-require-full-coverage = %v, %v; want no", got, err)
	}
}
