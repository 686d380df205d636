package integration

// Reading a Redis Cluster's topology for the failover and resharding tests:
// CLUSTER NODES as Redis sees it, node by node.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/service/store"
	"github.com/latchkey/latchkey/service/store/clustertest"
	"github.com/redis/go-redis/v9"
)

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	ID, Addr, MasterID string
	Flags              []string
	Slots              [][2]int // owned ranges, inclusive; migrating/importing markers left out
}

func (n clusterNode) is(flag string) bool { return slices.Contains(n.Flags, flag) }

// owns says whether the node serves slot.
func (n clusterNode) owns(slot int) bool {
	for _, r := range n.Slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// readClusterNodes is CLUSTER NODES as the node rdb talks to sees it.
func readClusterNodes(ctx context.Context, rdb *redis.Client) ([]clusterNode, error) {
	out, err := rdb.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var nodes []clusterNode
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{ID: f[0], Addr: addr, Flags: strings.Split(f[2], ","), MasterID: f[3]}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, ok := strings.Cut(s, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("CLUSTER NODES slot range %q", s)
			}
			n.Slots = append(n.Slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// primaries are the nodes serving slots, ordered by their first slot.
func primaries(nodes []clusterNode) []clusterNode {
	var ps []clusterNode
	for _, n := range nodes {
		if n.is("master") && !n.is("fail") && len(n.Slots) > 0 {
			ps = append(ps, n)
		}
	}
	slices.SortFunc(ps, func(a, b clusterNode) int { return a.Slots[0][0] - b.Slots[0][0] })
	return ps
}

// nodeClients are clients on every node of c, by address.
func nodeClients(t testing.TB, c *clustertest.Cluster) map[string]*redis.Client {
	t.Helper()
	m := map[string]*redis.Client{}
	for _, n := range c.Nodes {
		m[n.Addr] = newNodeClient(t, "redis://"+n.Addr)
	}
	return m
}

// topology is CLUSTER NODES of c as its first answering node sees it.
func topology(t testing.TB, nodes map[string]*redis.Client) []clusterNode {
	t.Helper()
	var last error
	for _, rdb := range nodes {
		ns, err := readClusterNodes(t.Context(), rdb)
		if err == nil {
			return ns
		}
		last = err
	}
	t.Fatalf("CLUSTER NODES: no node answers: %v", last)
	return nil
}

// namesOnSlots returns n names stem-0, stem-1... whose key (key(name))
// hashes to a slot for which want is true.
func namesOnSlots(t testing.TB, stem string, n int, key func(string) string, want func(slot int) bool) []string {
	t.Helper()
	var names []string
	for i := 0; len(names) < n; i++ {
		if i > 1_000_000 {
			t.Fatalf("no %d names of stem %s on the wanted slots", n, stem)
		}
		name := stem + "-" + strconv.Itoa(i)
		if want(store.Slot(key(name))) {
			names = append(names, name)
		}
	}
	return names
}

// clusterStateOK says whether every node in nodes (by address) reports
// cluster_state:ok.
func clusterStateOK(ctx context.Context, nodes map[string]*redis.Client, addrs []string) bool {
	for _, a := range addrs {
		info, err := nodes[a].ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return false
		}
	}
	return true
}
