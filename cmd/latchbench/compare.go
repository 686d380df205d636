package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// setup is one Redis deployment of -compare-clusters.
type setup struct {
	Name     string `json:"name"`
	Replicas int    `json:"replicas_per_primary"` // -1: a single node, not a cluster
}

// compareSetups are the deployments -compare-clusters runs, the single
// node first: every ratio is to it. Replicas run on the same cores as the
// primaries, so on a small machine the setup with replicas measures the
// machine (three more processes applying the primaries' writes), not the
// design; the one without replicas is the design's figure.
var compareSetups = []setup{
	{Name: "single Redis", Replicas: -1},
	{Name: "cluster, 3 primaries, no replicas", Replicas: 0},
	{Name: "cluster, 3 primaries + 3 replicas", Replicas: 1},
}

// Comparison is one scenario on one setup, against the single node's.
type Comparison struct {
	Scenario string  `json:"scenario"`
	Setup    string  `json:"setup"`
	RPS      float64 `json:"rps"`
	// RPSRatio is RPS over the single node's RPS of the same scenario;
	// CeilingRatio is the setup's rps_ratio_to_ceiling over the single
	// node's (each against its own server's ceiling, measured beside it).
	RPSRatio     float64 `json:"rps_ratio"`
	CeilingRatio float64 `json:"ceiling_ratio"`
	// RedisCPUus is the Redis CPU per request, µs, summed over the
	// primaries (INFO cpu); RedisCPURatio is it over the single node's.
	RedisCPUus    float64 `json:"redis_cpu_us_per_request"`
	RedisCPURatio float64 `json:"redis_cpu_ratio"`
	// ScriptCalls is EVALSHA calls per request, summed over the primaries.
	ScriptCalls float64 `json:"evalsha_per_request"`
}

// CompareReport is the whole -compare-clusters run.
type CompareReport struct {
	Machine     string       `json:"machine"`
	Connections int          `json:"connections"`
	Duration    string       `json:"duration_per_scenario"`
	Setups      []Report     `json:"setups"` // in compareSetups' order
	Comparison  []Comparison `json:"comparison"`
}

// runCompare runs o's scenarios on each of compareSetups, each with a
// server of its own, and reports each cluster setup's figures as ratios to
// the single node's of the same run.
func runCompare(ctx context.Context, o *options, stdout io.Writer) error {
	cr := CompareReport{Machine: machine(), Connections: o.conns, Duration: o.duration.String()}
	for _, su := range compareSetups {
		oo := *o
		oo.start = true
		if su.Replicas >= 0 {
			url, stop, err := startCluster(ctx, o.redisBin, o.redisCLI, 3, su.Replicas)
			if err != nil {
				return fmt.Errorf("%s: %w", su.Name, err)
			}
			defer stop()
			oo.cluster = url
		}
		stop, err := oo.connect(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", su.Name, err)
		}
		results, err := runScenarios(ctx, &oo)
		stop()
		if err != nil {
			return err
		}
		rep := Report{Connections: o.conns, Duration: o.duration.String(), Rounds: o.rounds, Results: results, Machine: su.Name}
		fmt.Fprintf(stdout, "=== %s\n", su.Name)
		printText(stdout, rep)
		cr.Setups = append(cr.Setups, rep)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	printLegend(stdout)
	cr.Comparison = compare(cr.Setups)
	printComparison(stdout, cr.Comparison)
	if o.jsonOut != "" {
		return writeJSON(stdout, o.jsonOut, cr)
	}
	return nil
}

// compare lines up every scenario but the ceiling of each setup against
// the first setup's (the single node).
func compare(setups []Report) []Comparison {
	if len(setups) == 0 {
		return nil
	}
	base := map[string]Result{}
	for _, r := range setups[0].Results {
		base[r.Scenario] = r
	}
	var out []Comparison
	for i, rep := range setups {
		for _, r := range rep.Results {
			b, ok := base[r.Scenario]
			if r.Scenario == "ceiling" || !ok || r.Requests == 0 || b.Requests == 0 {
				continue
			}
			c := Comparison{Scenario: r.Scenario, Setup: compareSetups[i].Name, RPS: r.RPS, RPSRatio: r.RPS / b.RPS,
				RedisCPUus: r.Usage.RedisCPUSeconds / float64(r.Requests) * 1e6, ScriptCalls: evalShaPerRequest(r)}
			if b.RPSRatio > 0 {
				c.CeilingRatio = r.RPSRatio / b.RPSRatio
			}
			if bc := b.Usage.RedisCPUSeconds / float64(b.Requests) * 1e6; bc > 0 {
				c.RedisCPURatio = c.RedisCPUus / bc
			}
			out = append(out, c)
		}
	}
	return out
}

// evalShaPerRequest is a result's EVALSHA calls per request over every node.
func evalShaPerRequest(r Result) float64 {
	var n int64
	for _, node := range r.Usage.RedisNodes {
		n += node.Calls["evalsha"]
	}
	return float64(n) / float64(r.Requests)
}

func printComparison(w io.Writer, cs []Comparison) {
	fmt.Fprintln(w, "against the single Redis of the same run (x rps: req/s over its req/s; x ceil: the same of each setup's ratio to its own ceiling;")
	fmt.Fprintln(w, "redis µs/q: Redis CPU per request summed over the primaries; evalsha/q: script calls per request):")
	fmt.Fprintf(w, "%-10s %-36s %9s %6s %6s %10s %7s %9s\n", "scenario", "setup", "req/s", "x rps", "x ceil", "redis µs/q", "x cpu", "evalsha/q")
	for _, c := range cs {
		fmt.Fprintf(w, "%-10s %-36s %9.0f %6.2f %6.2f %10.1f %7.2f %9.3f\n",
			c.Scenario, c.Setup, c.RPS, c.RPSRatio, c.CeilingRatio, c.RedisCPUus, c.RedisCPURatio, c.ScriptCalls)
	}
}

// startCluster starts a Redis Cluster of primaries primaries with replicas
// replicas each, from redis-server processes (no persistence) on loopback
// ports of 17000-17999 (each with its bus port, +10000, free), created
// with redis-cli --cluster create, and returns its seed URL once every node
// reports cluster_state:ok and every replica is in sync. stop kills the
// processes and removes their files.
func startCluster(ctx context.Context, redisBin, redisCLI string, primaries, replicas int) (url string, stop func(), err error) {
	n := primaries * (1 + replicas)
	base, err := freeClusterPorts(n)
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "latchbench-cluster-")
	if err != nil {
		return "", nil, err
	}
	var procs []*exec.Cmd
	stop = func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
		_ = os.RemoveAll(dir)
	}
	addrs := make([]string, n)
	for i := range n {
		port := base + i
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", port)
		nd := filepath.Join(dir, fmt.Sprint(port))
		if err := os.Mkdir(nd, 0o755); err != nil {
			stop()
			return "", nil, err
		}
		p := exec.Command(redisBin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", nd,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
			"--cluster-require-full-coverage", "no", "--save", "", "--appendonly", "no")
		if err := p.Start(); err != nil {
			stop()
			return "", nil, fmt.Errorf("start %s: %w", redisBin, err)
		}
		procs = append(procs, p)
	}
	clients := make([]*redis.Client, n)
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a})
		defer clients[i].Close()
	}
	ready := func(c *redis.Client) bool { return c.Ping(ctx).Err() == nil }
	if err := waitAll(ctx, clients, ready); err != nil {
		stop()
		return "", nil, fmt.Errorf("redis-server on %s: %w", addrs[0], err)
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", fmt.Sprint(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, redisCLI, args...).CombinedOutput(); err != nil {
		stop()
		return "", nil, fmt.Errorf("%s --cluster create: %w: %s", redisCLI, err, lastLines(string(out), 5))
	}
	inSync := func(c *redis.Client) bool {
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return false
		}
		repl, err := c.Info(ctx, "replication").Result()
		switch {
		case err != nil:
			return false
		case strings.Contains(repl, "role:slave"):
			return strings.Contains(repl, "master_link_status:up")
		default:
			return strings.Contains(repl, fmt.Sprintf("connected_slaves:%d", replicas))
		}
	}
	if err := waitAll(ctx, clients, inSync); err != nil {
		stop()
		return "", nil, fmt.Errorf("cluster on %s: %w", addrs[0], err)
	}
	url = "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	return url, stop, nil
}

// waitAll polls until ok holds for every client, for at most 30s.
func waitAll(ctx context.Context, clients []*redis.Client, ok func(*redis.Client) bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		all := true
		for _, c := range clients {
			if !ok(c) {
				all = false
				break
			}
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("not ready within 30s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freeClusterPorts returns the first port of n consecutive loopback ports
// in 17000-17999 that are free, with their cluster bus ports (+10000).
func freeClusterPorts(n int) (int, error) {
	for base := 17400; base+n <= 18000; base += 10 {
		free := true
		for p := base; p < base+n && free; p++ {
			for _, port := range []int{p, p + 10000} {
				ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
				if err != nil {
					free = false
					break
				}
				_ = ln.Close()
			}
		}
		if free {
			return base, nil
		}
	}
	return 0, errors.New("no free ports for a cluster in 17400-17999")
}
