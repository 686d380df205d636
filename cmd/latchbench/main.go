// Command latchbench is Latchkey's load generator. It drives a Latchkey
// server on a loopback address with N closed-loop keep-alive connections per
// scenario and reports throughput and latency percentiles, each also as a
// ratio to the `ceiling` scenario (a trivial route of the same server)
// measured in the same run, as text and JSON.
//
//	go run ./cmd/latchbench -start                # starts redis-server and Latchkey itself
//	go run ./cmd/latchbench -url http://127.0.0.1:8080 -scenarios ceiling,lock
//	go run ./cmd/latchbench -start -nginx /usr/sbin/nginx -caddy /usr/bin/caddy -scenarios gate,multi1,multi,leased,nginx,caddy
//	go run ./cmd/latchbench -start -scenarios gate,grpc1,grpc3   # Envoy's ShouldRateLimit beside the HTTP gate
//	go run ./cmd/latchbench -start -scenarios watchers,lock,election   # 10,000 watch streams; elections beside locks
//	go run ./cmd/latchbench -start -wrk /usr/bin/wrk -scenarios gate,check,lock   # the same rows driven by wrk
//	go run ./cmd/latchbench -start -redis-cluster 'redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002'
//
// Every scenario's notes say what each Redis node did per request: CPU,
// commands and the busiest commands (INFO cpu, stats and commandstats), of
// the one node or of every primary of a cluster.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "latchbench:", err)
		os.Exit(1)
	}
}

type options struct {
	url       string
	start     bool
	serverBin string
	redisBin  string
	conns     int
	rounds    int
	duration  time.Duration
	warmup    time.Duration
	scenarios string
	jsonOut   string
	redisURL  string
	cluster   string
	compare   bool
	redisCLI  string
	// wrkBin, when set, is the wrk that drives the closed-loop scenarios
	// it can express (wrk, set from it, runs it), with wrkThreads threads.
	wrkBin     string
	wrkThreads int
	wrk        *wrkDriver
	b          bench
	meter      meter
	// ceilingOp is the ceiling scenario's iteration, run in every round of
	// a paired scenario.
	ceilingOp func(context.Context, *worker)
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("latchbench", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.StringVar(&o.url, "url", "", "base URL of a running Latchkey on a loopback address (or use -start)")
	fs.BoolVar(&o.start, "start", false, "start redis-server and a Latchkey server on free loopback ports for the run")
	fs.StringVar(&o.serverBin, "server-bin", "", "Latchkey server binary for -start (default: go build ./cmd/server)")
	fs.StringVar(&o.redisBin, "redis-server", "redis-server", "redis-server binary for -start")
	fs.IntVar(&o.conns, "c", 64, "concurrent keep-alive connections per scenario (1-1024)")
	fs.DurationVar(&o.duration, "d", 10*time.Second, "duration of each scenario (at most 5m)")
	fs.IntVar(&o.rounds, "rounds", 5, "paired rounds per scenario: each runs the ceiling, then the scenario, for d/rounds; ratios are the median over rounds (1-100)")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured warm-up before each scenario")
	fs.StringVar(&o.scenarios, "scenarios", "ceiling,gate,check,lock,contended,rwlock,keepalive,waiters", "comma-separated scenarios; ceiling always runs first")
	fs.StringVar(&o.jsonOut, "json", "", "also write the results as JSON to this file (- for stdout)")
	fs.StringVar(&o.b.gatePolicy, "gate-policy", "bench", "policy name for gate and keepalive")
	fs.StringVar(&o.b.checkPolicy, "check-policy", "bench", "policy name for check")
	fs.IntVar(&o.b.ips, "ips", 10000, "distinct client IPs / keys for gate and check")
	fs.IntVar(&o.b.names, "names", 100000, "distinct lock names for lock")
	fs.IntVar(&o.b.hotNames, "hot-names", 8, "lock names shared by all clients in contended")
	fs.IntVar(&o.b.leases, "leases", 1000, "keep-alive leases held during keepalive")
	fs.DurationVar(&o.b.leaseTTL, "lease-ttl", 30*time.Second, "TTL of the keep-alive leases (renewed every third of it)")
	fs.IntVar(&o.b.leaseSlots, "lease-slots", 0, "put the keep-alive leases' names in hash slots 0..N-1 (0: any slot), so a cluster's registry shards hold leases/N each, as with many more leases over all 16384 slots")
	fs.IntVar(&o.b.waiters, "waiters", 10000, "concurrent waiters in the waiters scenario (at most 15000)")
	fs.IntVar(&o.b.waiterNames, "waiter-names", 100, "locks the waiters queue on")
	fs.IntVar(&o.b.watchers, "watchers", 10000, "watch streams open in the watchers scenario (at most 15000; the server's -watch-max-streams and -watch-max-streams-per-client must allow them, as -start configures it)")
	fs.IntVar(&o.b.watchNames, "watch-names", 100, "locks the watchers watch (-watchers must be a multiple of it)")
	fs.StringVar(&o.b.nginxBin, "nginx", "", "nginx binary for the nginx scenario (it starts nginx on loopback ports with deploy/nginx/nginx.conf in front of the server; the server needs the per-ip policy, as -start configures it)")
	fs.StringVar(&o.b.caddyBin, "caddy", "", "caddy binary for the caddy scenario (it starts Caddy on loopback ports with deploy/caddy/Caddyfile in front of the server; the server needs the per-ip policy, as -start configures it)")
	fs.StringVar(&o.b.grpcAddr, "grpc-addr", "", "the server's gRPC port (its -grpc-addr, host:port on loopback) for grpc1 and grpc3 (set by -start)")
	fs.IntVar(&o.b.grpcConns, "grpc-conns", 4, "HTTP/2 connections the gRPC scenarios share their -c clients' unary calls over (1-64)")
	fs.StringVar(&o.redisURL, "redis-url", "", "the server's Redis, to report Redis commands and CPU per scenario (set by -start)")
	fs.StringVar(&o.cluster, "redis-cluster", "", "seed URL of a Redis Cluster on loopback (redis://h1:p1?addr=h2:p2&addr=h3:p3): -start runs Latchkey on it instead of a redis-server of its own; Redis commands and CPU are reported per primary")
	fs.BoolVar(&o.compare, "compare-clusters", false, "with -start: run the scenarios on a single redis-server, then on a cluster of 3 primaries without replicas, then with one replica each (all started on loopback ports 17000-17999), and report each cluster's throughput and Redis CPU per request as ratios to the single node's")
	fs.StringVar(&o.redisCLI, "redis-cli", "redis-cli", "redis-cli binary, which creates the clusters of -compare-clusters")
	fs.StringVar(&o.wrkBin, "wrk", "", "path to the wrk binary (Debian: /usr/bin/wrk); when set, wrk instead of latchbench's Go client drives every closed-loop scenario it can express "+
		"(ceiling, gate, check, lock, rwread, semcycle, election, contended, rwlock, keepalive, keepidle, semaphore, multi1, multi, leased, leased10k, nginx, caddy), in the same paired rounds against a wrk-driven ceiling, "+
		"with the same -c connections (nginx and caddy: wrk against the gateway alone, then gated); wrk takes whole seconds, so each round lasts d/rounds rounded (at least 1s), "+
		"and its latency percentiles are the median of the rounds'; the others (waiters, watchers, grpc1, grpc3) keep the Go client")
	fs.IntVar(&o.wrkThreads, "wrk-threads", 2, "wrk's threads with -wrk (1-64, at most -c; -c must be a multiple of them: wrk gives each thread c/threads connections)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.conns < 1 || o.conns > 1024 {
		return fmt.Errorf("-c %d: want 1-1024", o.conns)
	}
	if o.rounds < 1 || o.rounds > 100 {
		return fmt.Errorf("-rounds %d: want 1-100", o.rounds)
	}
	if o.duration <= 0 || o.duration > 5*time.Minute {
		return fmt.Errorf("-d %s: want (0, 5m]", o.duration)
	}
	if o.b.waiters < 1 || o.b.waiters > 15000 || o.b.waiterNames < 1 {
		return fmt.Errorf("-waiters %d / -waiter-names %d: want 1-15000 waiters on at least one lock", o.b.waiters, o.b.waiterNames)
	}
	if o.b.watchers < 1 || o.b.watchers > 15000 || o.b.watchNames < 1 || o.b.watchers%o.b.watchNames != 0 {
		return fmt.Errorf("-watchers %d / -watch-names %d: want 1-15000 watchers, a multiple of the locks they watch", o.b.watchers, o.b.watchNames)
	}
	if o.b.leaseSlots < 0 || o.b.leaseSlots > store.ClusterSlots {
		return fmt.Errorf("-lease-slots %d: want 0-%d", o.b.leaseSlots, store.ClusterSlots)
	}
	if o.b.grpcConns < 1 || o.b.grpcConns > 64 {
		return fmt.Errorf("-grpc-conns %d: want 1-64", o.b.grpcConns)
	}
	if o.wrkThreads < 1 || o.wrkThreads > 64 {
		return fmt.Errorf("-wrk-threads %d: want 1-64", o.wrkThreads)
	}
	if t := min(o.wrkThreads, o.conns); o.wrkBin != "" && o.conns%t != 0 {
		return fmt.Errorf("-c %d is not a multiple of -wrk-threads %d: wrk would open %d connections", o.conns, t, o.conns/t*t)
	}
	if o.start == (o.url != "") {
		return errors.New("give exactly one of -url and -start")
	}
	if o.cluster != "" && o.redisURL != "" {
		return errors.New("give at most one of -redis-url and -redis-cluster")
	}
	if o.wrkBin != "" {
		d, err := newWrkDriver(o.wrkBin, o.wrkThreads)
		if err != nil {
			return err
		}
		defer d.close()
		o.wrk = d
	}
	if o.compare {
		if !o.start || o.cluster != "" || o.redisURL != "" {
			return errors.New("-compare-clusters starts its own Redis and clusters: give -start and neither -redis-url nor -redis-cluster")
		}
		return runCompare(ctx, &o, stdout)
	}
	stop, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer stop()
	results, err := runScenarios(ctx, &o)
	if err != nil {
		return err
	}
	report := Report{Connections: o.conns, Duration: o.duration.String(), Rounds: o.rounds, Results: results, Machine: machine()}
	if o.wrk != nil {
		report.LoadGenerator = fmt.Sprintf("wrk -t%d -c%d (%s) in rounds of %ds where it can express the scenario; latchbench's Go client elsewhere",
			o.wrk.threadsFor(o.conns), o.conns, o.wrk.bin, wrkSeconds(o.duration/time.Duration(o.rounds)))
	}
	printText(stdout, report)
	printLegend(stdout)
	if o.jsonOut != "" {
		return writeJSON(stdout, o.jsonOut, report)
	}
	return nil
}

// connect starts the stack when o.start (on o.cluster when set), checks
// that the server is on loopback and opens the Redis nodes to meter. The
// function returned stops what it started.
func (o *options) connect(ctx context.Context) (func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if o.start {
		st, err := startStack(ctx, o.serverBin, o.redisBin, o.cluster)
		if err != nil {
			return nil, err
		}
		stops = append(stops, st.stop)
		o.url, o.redisURL, o.b.grpcAddr = st.url, st.redisURL, st.grpcAddr
	}
	if err := checkLoopback(o.url); err != nil {
		stop()
		return nil, err
	}
	o.b.base = strings.TrimRight(o.url, "/")
	o.b.run = o
	o.meter.base = o.b.base
	o.meter.redis = nil
	if o.redisURL != "" || o.cluster != "" {
		flagName, raw := "-redis-url", o.redisURL
		if o.cluster != "" {
			flagName, raw = "-redis-cluster", o.cluster
		}
		nodes, err := openRedisNodes(raw, o.cluster != "")
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s: %w", flagName, err)
		}
		o.meter.redis = nodes
		stops = append(stops, nodes.Close)
	}
	return stop, nil
}

// printLegend explains printText's columns.
func printLegend(w io.Writer) {
	fmt.Fprintln(w, "by: the load generator (go: latchbench's client; wrk: -wrk, its percentiles the median of the rounds');\n"+
		"x rps, x p99: ratio to the ceiling (median of the paired rounds), [min–max]: the rounds' lowest and highest x rps;\n"+
		"cpu s: server CPU seconds; rss: server resident memory at the end; r ops/q: Redis commands per request,\n"+
		"counting those the scripts run (INFO total_commands_processed); r cpu s: Redis CPU seconds;\n"+
		"lg cpu s: the load generator's own CPU seconds; redis notes: per node (every primary of a cluster),\n"+
		"CPU µs and commands per request and the most called commands per request (INFO commandstats)")
}

// runScenarios runs the scenarios o names, the ceiling first, against
// o.b.base and returns their results. Returns an error for an unknown
// scenario.
func runScenarios(ctx context.Context, o *options) ([]Result, error) {
	want := map[string]bool{"ceiling": true}
	for _, s := range strings.Split(o.scenarios, ",") {
		want[strings.TrimSpace(s)] = true
	}
	var results []Result
	var ceiling Result
	all := o.b.scenarios()
	o.ceilingOp = all[0].op
	for _, sc := range all {
		if !want[sc.name] {
			continue
		}
		delete(want, sc.name)
		res, err := runScenario(ctx, o, sc)
		if err != nil {
			res = Result{Scenario: sc.name, Description: sc.description, Notes: []string{"skipped: " + err.Error()}}
		}
		if res.Driver == "" {
			res.Driver = driverGo
			if o.wrk != nil && err == nil {
				res.Notes = append(res.Notes, "driven by latchbench's Go client: wrk cannot express it")
			}
		}
		res.Notes = append(res.Notes, nodeNotes(res.Usage.RedisNodes, res.Requests)...)
		if sc.name == "ceiling" {
			ceiling = res
			res.RPSRatio, res.P99Ratio = 1, 1
		}
		if res.RPSRatio == 0 && ceiling.RPS > 0 && res.RPS > 0 && sc.name != "watchers" && res.Driver == ceiling.Driver {
			// (watchers' rate is events delivered, no request's.)
			// A scenario of its own shape: against the ceiling measured first.
			res.RPSRatio = res.RPS / ceiling.RPS
			res.P99Ratio = res.P99MS / ceiling.P99MS
		}
		results = append(results, res)
		if ctx.Err() != nil {
			break
		}
	}
	cpuPerDecision(results)
	cpuBudget(results)
	electionAgainstLock(results)
	delete(want, "")
	for name := range want {
		return nil, fmt.Errorf("unknown scenario %q", name)
	}
	return results, nil
}

func runScenario(ctx context.Context, o *options, sc scenario) (Result, error) {
	if sc.setup != nil {
		cleanup, err := sc.setup(ctx, &o.b)
		if err != nil {
			return Result{}, err
		}
		defer cleanup()
	}
	if sc.run != nil { // a scenario with its own shape, not a closed loop
		before := o.meter.read(ctx)
		res, err := sc.run(ctx)
		if !sc.metered {
			// (wrk's CPU, when it ran the load, is not this process's.)
			wrkCPU := res.Usage.LoadgenCPUSeconds
			res.Usage = o.meter.usage(before, o.meter.read(ctx), res.Requests)
			res.Usage.LoadgenCPUSeconds += wrkCPU
		}
		res.Description = sc.description
		return res, err
	}
	var res Result
	switch {
	case o.wrk != nil && sc.wrk != nil:
		var err error
		if res, err = runWrkScenario(ctx, o, sc); err != nil {
			return res, err
		}
		if sc.name == "ceiling" {
			return res, nil
		}
	default:
		if o.warmup > 0 {
			runLoad(ctx, o.b.base, o.conns, o.warmup, sc.op)
		}
		if sc.name == "ceiling" {
			before := o.meter.read(ctx)
			samples, elapsed := runLoad(ctx, o.b.base, o.conns, o.duration, sc.op)
			res := summarize(sc.name, samples, elapsed)
			res.Usage = o.meter.usage(before, o.meter.read(ctx), res.Requests)
			res.Description = sc.description
			return res, nil
		}
		res = runPaired(ctx, o, sc)
	}
	if sc.name == "keepalive" || sc.name == "keepidle" {
		res.Notes = append(res.Notes, o.meter.keepaliveReport(ctx)...)
		if u := res.Usage; sc.name == "keepidle" && u.KeepaliveRenewals > 0 && u.RedisCPUSeconds > 0 {
			// Only here are renewals nearly all Redis does.
			res.Notes = append(res.Notes, fmt.Sprintf("%.0f renewals while measured: %.1f µs Redis CPU per renewal",
				u.KeepaliveRenewals, u.RedisCPUSeconds/u.KeepaliveRenewals*1e6))
		}
	}
	if res.Requests == 0 {
		return res, fmt.Errorf("no request succeeded (%d transport errors)", res.Errors)
	}
	return res, nil
}

// checkLoopback refuses any target but a loopback address: load is only
// ever sent to this machine.
func checkLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("-url %q: want http://127.0.0.1:PORT", raw)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-url %q: latchbench only sends load to loopback addresses", raw)
	}
	return nil
}

// Report is the whole run.
type Report struct {
	Machine     string `json:"machine"`
	Connections int    `json:"connections"`
	Duration    string `json:"duration_per_scenario"`
	Rounds      int    `json:"rounds"`
	// LoadGenerator says which load generator drove the rows, when wrk
	// drove some of them (each row's load_generator says which).
	LoadGenerator string   `json:"load_generator,omitempty"`
	Results       []Result `json:"results"`
}

func printText(w io.Writer, r Report) {
	fmt.Fprintf(w, "latchbench: %d connections, %s per scenario in %d paired rounds, %s\n", r.Connections, r.Duration, r.Rounds, r.Machine)
	if r.LoadGenerator != "" {
		fmt.Fprintf(w, "load: %s\n", r.LoadGenerator)
	}
	fmt.Fprintf(w, "%-10s %-4s %9s %7s %7s %8s %8s %6s %6s %-11s %6s %7s %7s %7s %7s %7s  %s\n",
		"scenario", "by", "req/s", "p50ms", "p90ms", "p99ms", "p99.9ms", "errors", "x rps", "[min–max]", "x p99",
		"cpu s", "rss MiB", "r ops/q", "r cpu s", "lg cpu s", "non-2xx")
	for _, res := range r.Results {
		if res.Requests == 0 {
			fmt.Fprintf(w, "%-10s %s\n", res.Scenario, strings.Join(res.Notes, "; "))
			continue
		}
		u := res.Usage
		fmt.Fprintf(w, "%-10s %-4s %9.0f %7.2f %7.2f %8.2f %8.2f %6d %6.2f %-11s %6.2f %7.2f %7.1f %7.2f %7.2f %8.2f  %v\n",
			res.Scenario, driverColumn(res.Driver), res.RPS, res.P50MS, res.P90MS, res.P99MS, res.P999MS, res.Errors, res.RPSRatio,
			ratioRange(res), res.P99Ratio, u.ServerCPUSeconds, u.ServerRSSEndMiB, u.RedisCmdsPerReq, u.RedisCPUSeconds,
			u.LoadgenCPUSeconds, res.Non2xx)
	}
	for _, res := range r.Results {
		for _, n := range res.Notes {
			fmt.Fprintf(w, "  %s: %s\n", res.Scenario, n)
		}
	}
}

// driverColumn is printText's short name for a row's load generator.
func driverColumn(driver string) string {
	if driver == driverWrk {
		return "wrk"
	}
	return "go"
}

// ratioRange is printText's [min–max] of a row's per-round throughput
// ratios, "-" for a row without rounds.
func ratioRange(res Result) string {
	if len(res.RoundRPSRatios) == 0 {
		return "-"
	}
	return fmt.Sprintf("[%.2f–%.2f]", res.RPSRatioMin, res.RPSRatioMax)
}

func writeJSON(stdout io.Writer, path string, r any) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
