package main

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// redisNodes reads the counters of every Redis node a run loads: the one
// server of -redis-url, or every primary of the cluster of -redis-cluster.
type redisNodes struct {
	single  *redis.Client        // nil on a cluster
	cluster *redis.ClusterClient // nil on a single node
}

// openRedisNodes connects to the Redis at rawURL: a cluster's seed URL
// (redis://h1:p1?addr=h2:p2&addr=h3:p3) when cluster is set, else one node's.
// It returns an error for a malformed URL or an address that is not on
// loopback; it does not dial.
func openRedisNodes(rawURL string, cluster bool) (*redisNodes, error) {
	var addrs []string
	var n redisNodes
	if cluster {
		opts, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, err
		}
		addrs = opts.Addrs
		n.cluster = redis.NewClusterClient(opts)
	} else {
		opts, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, err
		}
		addrs = []string{opts.Addr}
		n.single = redis.NewClient(opts)
	}
	for _, a := range addrs {
		if err := checkLoopback("http://" + a); err != nil {
			n.Close()
			return nil, err
		}
	}
	return &n, nil
}

// Close closes the connections.
func (n *redisNodes) Close() {
	if n.cluster != nil {
		_ = n.cluster.Close()
	}
	if n.single != nil {
		_ = n.single.Close()
	}
}

// nodeSnapshot is one node's counters at one moment.
type nodeSnapshot struct {
	cmds  int64            // total_commands_processed
	cpu   float64          // used_cpu_sys + used_cpu_user, seconds
	calls map[string]int64 // INFO commandstats: calls per command
}

// read returns every node's counters by address. A node that does not
// answer is left out (its usage then reads as zero), so a failed read never
// stops a run.
func (n *redisNodes) read(ctx context.Context) map[string]nodeSnapshot {
	out := map[string]nodeSnapshot{}
	var mu sync.Mutex
	readOne := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "stats", "cpu", "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		out[c.Options().Addr] = parseInfo(info)
		mu.Unlock()
		return nil
	}
	if n.single != nil {
		_ = readOne(ctx, n.single)
	} else {
		_ = n.cluster.ForEachMaster(ctx, readOne)
	}
	return out
}

// parseInfo reads the counters nodeSnapshot holds out of an INFO reply.
func parseInfo(info string) nodeSnapshot {
	s := nodeSnapshot{calls: map[string]int64{}}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		switch {
		case k == "total_commands_processed":
			s.cmds, _ = strconv.ParseInt(v, 10, 64)
		case k == "used_cpu_sys" || k == "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += f
		case strings.HasPrefix(k, "cmdstat_"):
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			s.calls[strings.TrimPrefix(k, "cmdstat_")], _ = strconv.ParseInt(calls, 10, 64)
		}
	}
	return s
}

// nodeUsage is what one Redis node did during a scenario. Commands counts
// those the scripts run too; the INFO calls latchbench makes itself are not
// counted.
type nodeUsage struct {
	Addr       string           `json:"addr"`
	Commands   int64            `json:"commands"`
	CPUSeconds float64          `json:"cpu_seconds"`
	Calls      map[string]int64 `json:"calls,omitempty"` // per command, from INFO commandstats
}

// nodeUsages is the difference between two readings, one entry per node
// read both times, ordered by address.
func nodeUsages(before, after map[string]nodeSnapshot) []nodeUsage {
	var out []nodeUsage
	for addr, a := range after {
		b, ok := before[addr]
		if !ok {
			continue
		}
		u := nodeUsage{Addr: addr, Commands: a.cmds - b.cmds - 1, CPUSeconds: a.cpu - b.cpu, Calls: map[string]int64{}}
		for cmd, calls := range a.calls {
			if d := calls - b.calls[cmd]; d > 0 && cmd != "info" {
				u.Calls[cmd] = d
			}
		}
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// addNodeUsages adds one round's per-node usage to the total, node by node.
func addNodeUsages(total, round []nodeUsage) []nodeUsage {
	byAddr := map[string]int{}
	for i, u := range total {
		byAddr[u.Addr] = i
	}
	for _, r := range round {
		i, ok := byAddr[r.Addr]
		if !ok {
			byAddr[r.Addr] = len(total)
			total = append(total, nodeUsage{Addr: r.Addr, Calls: map[string]int64{}})
			i = len(total) - 1
		}
		t := &total[i]
		t.Commands += r.Commands
		t.CPUSeconds += r.CPUSeconds
		for cmd, calls := range r.Calls {
			t.Calls[cmd] += calls
		}
	}
	sort.Slice(total, func(i, j int) bool { return total[i].Addr < total[j].Addr })
	return total
}

// nodeNotes says per node what it did per request of the scenario: its
// share of the commands, commands and CPU microseconds per request, and
// its busiest commands.
func nodeNotes(nodes []nodeUsage, requests int) []string {
	var total int64
	var cpu float64
	for _, u := range nodes {
		total += u.Commands
		cpu += u.CPUSeconds
	}
	if requests == 0 || total <= 0 {
		return nil
	}
	q := float64(requests)
	notes := []string{fmt.Sprintf("redis: %d node(s), %.1f µs CPU and %.2f commands per request in all", len(nodes), cpu/q*1e6, float64(total)/q)}
	for _, u := range nodes {
		share := 0.0
		if total > 0 {
			share = float64(u.Commands) / float64(total) * 100
		}
		notes = append(notes, fmt.Sprintf("redis %s: %.1f µs CPU/req, %.2f cmds/req (%.0f%% of commands); %s",
			hostPort(u.Addr), u.CPUSeconds/q*1e6, float64(u.Commands)/q, share, topCalls(u.Calls, q, 8)))
	}
	return notes
}

// topCalls lists the n most called commands as "name calls-per-request".
func topCalls(calls map[string]int64, requests float64, n int) string {
	type kv struct {
		cmd   string
		calls int64
	}
	var all []kv
	for c, v := range calls {
		all = append(all, kv{c, v})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].calls != all[j].calls {
			return all[i].calls > all[j].calls
		}
		return all[i].cmd < all[j].cmd
	})
	if len(all) > n {
		all = all[:n]
	}
	parts := make([]string, len(all))
	for i, e := range all {
		parts[i] = fmt.Sprintf("%s %.2f", e.cmd, float64(e.calls)/requests)
	}
	if len(parts) == 0 {
		return "no commands"
	}
	return strings.Join(parts, ", ")
}

// hostPort shortens a loopback address to its port.
func hostPort(addr string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil && (host == "127.0.0.1" || host == "localhost") {
		return ":" + port
	}
	return addr
}

// numSub is how many subscriptions the nodes hold to channels: PUBSUB
// NUMSUB on one node, PUBSUB SHARDNUMSUB summed over a cluster's primaries
// (the server subscribes with SSUBSCRIBE there).
func (n *redisNodes) numSub(ctx context.Context, channels []string) (int64, error) {
	if n.single != nil {
		m, err := n.single.PubSubNumSub(ctx, channels...).Result()
		return sumCounts(m), err
	}
	var total atomic.Int64
	err := n.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		m, err := c.PubSubShardNumSub(ctx, channels...).Result()
		total.Add(sumCounts(m))
		return err
	})
	return total.Load(), err
}

func sumCounts(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
