package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The gateway-scale scenarios: the gate on a three-limit policy and on a
// one-limit one decided the same way (their server CPU per decision
// compared), on a leased limit, and behind nginx and Caddy.
func (b *bench) gatewayScenarios() []scenario {
	// gate sends gate's requests to policy's gate and, with apiKey, the
	// X-Api-Key of the same number, which only bench3's per-key limit
	// reads: the others send what gate sends, so their ratios to it
	// compare the policies alone.
	gate := func(policy string, apiKey bool) func(context.Context, *worker) {
		return func(ctx context.Context, w *worker) {
			n := w.next()
			req := newRequest(ctx, http.MethodGet, b.base+"/v1/ratelimit/gate/"+policy, "")
			req.Header.Set("X-Forwarded-For", clientIP(n%uint64(b.ips)))
			if apiKey {
				req.Header.Set("X-Api-Key", fmt.Sprintf("key-%d", n%uint64(b.ips)))
			}
			w.do(req, false)
		}
	}
	return []scenario{
		{
			name:        "multi1",
			description: "GET /v1/ratelimit/gate/bench1: a policy of one limit in the limits: form (batched, as gate)",
			op:          gate("bench1", false),
			wrk:         b.wrkGate("bench1", false),
		},
		{
			name:        "multi",
			description: "GET /v1/ratelimit/gate/bench3: three limits (per-ip fixed window, per-key sliding window, global token bucket) in one decision, batched",
			op:          gate("bench3", true),
			wrk:         b.wrkGate("bench3", true),
		},
		{
			name:        "leased",
			description: "GET /v1/ratelimit/gate/leased: a global fixed-window limit of 1e9 per minute with lease: 1000",
			op:          gate("leased", false),
			wrk:         b.wrkGate("leased", false),
		},
		{
			name: "leased10k",
			description: "GET /v1/ratelimit/gate/leased-ip: a per-ip fixed-window limit of 1e9 per minute with lease: 1000, " +
				"over the gate's -ips (10,000) client IPs, one lease pool each",
			op:  gate("leased-ip", false),
			wrk: b.wrkGate("leased-ip", false),
		},
		{
			name:        "nginx",
			description: "nginx with deploy/nginx/nginx.conf (auth_request to the gate, per-ip) against the same nginx without auth_request",
			run: func(ctx context.Context) (Result, error) {
				if b.nginxBin == "" {
					return Result{}, fmt.Errorf("no nginx (give -nginx with -start)")
				}
				return b.runGateway(ctx, "nginx", func(ctx context.Context) (gateway, error) {
					return startNginx(ctx, b.nginxBin, b.base)
				})
			},
		},
		{
			name:        "caddy",
			description: "Caddy with deploy/caddy/Caddyfile (forward_auth to the gate, per-ip on /) against the same Caddy's reverse_proxy to the app without forward_auth",
			run: func(ctx context.Context) (Result, error) {
				if b.caddyBin == "" {
					return Result{}, fmt.Errorf("no caddy (give -caddy with -start)")
				}
				return b.runGateway(ctx, "caddy", func(ctx context.Context) (gateway, error) {
					return startCaddy(ctx, b.caddyBin, b.base)
				})
			},
		},
	}
}

// cpuPerDecision notes each multi-limit scenario's server CPU per request,
// the three-limit decision's against the one-limit ones', gRPC's three
// descriptors' against one's, and one descriptor's against the HTTP gate's.
func cpuPerDecision(results []Result) {
	per := map[string]float64{}
	for _, r := range results {
		if r.Requests > 0 && r.Usage.ServerCPUSeconds > 0 {
			per[r.Scenario] = r.Usage.ServerCPUSeconds / float64(r.Requests) * 1e6
		}
	}
	for i, r := range results {
		us, ok := per[r.Scenario]
		if !ok || !slices.Contains([]string{"multi", "multi1", "gate", "leased", "leased10k", "grpc1", "grpc3"}, r.Scenario) {
			continue
		}
		note := fmt.Sprintf("server CPU per decision %.1f µs", us)
		for _, one := range map[string][]string{"multi": {"multi1", "gate"}, "grpc3": {"grpc1"}, "grpc1": {"gate"}}[r.Scenario] {
			if base, ok := per[one]; ok {
				note += fmt.Sprintf("; %.2f× %s's", us/base, one)
			}
		}
		results[i].Notes = append(results[i].Notes, note)
	}
}

// gateway is a gateway scenario's running gateway: the URLs of the gateway
// alone and of its gated front, its main process (nginx's workers are its
// children) and the function that stops it.
type gateway struct {
	alone, gated string
	pid          int
	stop         func()
}

// runGateway runs paired rounds through a gateway that start started:
// the gateway alone (its ceiling in this scenario: the same gateway proxying
// to the same app, keeping its connections to it as its documentation
// recommends, the baseline a user would compare with), then the gateway
// asking the gate before each request. The ratio is the median of
// gated / alone over the rounds; a note gives each side's CPU a request
// (gatewayCPU).
func (b *bench) runGateway(ctx context.Context, name string, start func(context.Context) (gateway, error)) (Result, error) {
	o := b.run
	if o == nil {
		return Result{}, fmt.Errorf("%s: the gateway scenarios need -start or -url", name)
	}
	gw, err := start(ctx)
	if err != nil {
		return Result{}, err
	}
	defer gw.stop()
	if o.wrk != nil {
		return b.runGatewayWrk(ctx, name, gw)
	}
	op := func(url string) func(context.Context, *worker) {
		return func(ctx context.Context, w *worker) {
			w.do(newRequest(ctx, http.MethodGet, url+"/", ""), false)
		}
	}
	slice := o.duration / time.Duration(o.rounds)
	var all []sample
	var elapsed time.Duration
	var ratios []float64
	var aloneRPS []float64
	var cpu gatewayCPU
	for r := 0; r < o.rounds && ctx.Err() == nil; r++ {
		t0 := b.cpuNow(ctx, gw)
		as, ae := runLoad(ctx, gw.alone, o.conns, slice, op(gw.alone))
		a := summarize(name+"-alone", as, ae)
		t1 := b.cpuNow(ctx, gw)
		gs, ge := runLoad(ctx, gw.gated, o.conns, slice, op(gw.gated))
		g := summarize(name, gs, ge)
		cpu.add(t0, t1, b.cpuNow(ctx, gw), a.Requests, g.Requests, 0, 0)
		all, elapsed = append(all, gs...), elapsed+ge
		if a.RPS > 0 && g.RPS > 0 {
			ratios = append(ratios, g.RPS/a.RPS)
			aloneRPS = append(aloneRPS, a.RPS)
		}
	}
	res := summarize(name, all, elapsed)
	setRoundRatios(&res, ratios, nil)
	res.Notes = append(res.Notes, fmt.Sprintf("ratio to %s alone (%.0f req/s, median of rounds), not to /healthz", name, median(aloneRPS)))
	res.Notes = append(res.Notes, cpu.note(name)...)
	return res, nil
}

// cpuParts is the CPU seconds used so far by each part of a gateway
// scenario: the gateway (its processes), Latchkey, Redis and the load
// generator (this process; wrk's is added per run).
type cpuParts struct{ gateway, server, redis, loadgen float64 }

// cpuNow reads cpuParts: the gateway's from /proc, the rest as the meter
// reads them.
func (b *bench) cpuNow(ctx context.Context, gw gateway) cpuParts {
	s := b.run.meter.read(ctx)
	p := cpuParts{gateway: procTreeCPUSeconds(gw.pid), server: s.serverCPU, loadgen: s.loadgenCPU}
	for _, n := range s.redis {
		p.redis += n.cpu
	}
	return p
}

// gatewayCPU sums a gateway scenario's CPU over its rounds: of the rounds
// of the gateway alone and of the gated ones, with their requests.
type gatewayCPU struct {
	alone, gated         cpuParts
	aloneReqs, gatedReqs int
	aloneWrk, gatedWrk   float64 // wrk's CPU, when it drove the rounds
}

// add counts one round: t0 before the gateway alone, t1 between it and the
// gated run, t2 after; the requests of each and wrk's CPU in each.
func (c *gatewayCPU) add(t0, t1, t2 cpuParts, aloneReqs, gatedReqs int, aloneWrk, gatedWrk float64) {
	c.alone.gateway += t1.gateway - t0.gateway
	c.alone.server += t1.server - t0.server
	c.alone.redis += t1.redis - t0.redis
	c.alone.loadgen += t1.loadgen - t0.loadgen + aloneWrk
	c.gated.gateway += t2.gateway - t1.gateway
	c.gated.server += t2.server - t1.server
	c.gated.redis += t2.redis - t1.redis
	c.gated.loadgen += t2.loadgen - t1.loadgen + gatedWrk
	c.aloneReqs += aloneReqs
	c.gatedReqs += gatedReqs
}

// note says what a request costs each part alone and gated, in µs, and the
// ratio that CPU bounds gated ÷ alone to on cores they all share: what the
// gate adds to every request is Latchkey's and Redis's CPU and the
// gateway's own for the subrequest.
func (c gatewayCPU) note(name string) []string {
	if c.aloneReqs == 0 || c.gatedReqs == 0 || c.alone.gateway <= 0 {
		return nil
	}
	us := func(sec float64, n int) float64 { return sec / float64(n) * 1e6 }
	aGw, aLg := us(c.alone.gateway, c.aloneReqs), us(c.alone.loadgen, c.aloneReqs)
	gGw, gSrv, gRd, gLg := us(c.gated.gateway, c.gatedReqs), us(c.gated.server, c.gatedReqs), us(c.gated.redis, c.gatedReqs), us(c.gated.loadgen, c.gatedReqs)
	alone, gated := aGw+aLg, gGw+gSrv+gRd+gLg
	return []string{fmt.Sprintf("CPU a request: %s alone: %s %.1f µs, load generator %.1f µs: %.1f µs; gated: %s %.1f µs, Latchkey %.1f µs, Redis %.1f µs, load generator %.1f µs: %.1f µs; the CPU bounds gated ÷ alone to %.2f",
		name, name, aGw, aLg, alone, name, gGw, gSrv, gRd, gLg, gated, alone/gated)}
}

// procTreeCPUSeconds is the user and system CPU of process pid and its
// children (nginx's workers), from /proc (0 where it cannot be read).
// Linux counts it in clock ticks of 1/100 s (USER_HZ).
func procTreeCPUSeconds(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	const userHZ = 100
	ticks := func(stat string) (ppid int, t float64, ok bool) {
		// The command name, in parentheses, may hold spaces: the fields
		// follow its closing parenthesis.
		i := strings.LastIndexByte(stat, ')')
		if i < 0 {
			return 0, 0, false
		}
		f := strings.Fields(stat[i+1:])
		if len(f) < 13 { // state ppid ... utime(12) stime(13), from field 3
			return 0, 0, false
		}
		ppid, _ = strconv.Atoi(f[1])
		u, _ := strconv.ParseFloat(f[11], 64)
		s, _ := strconv.ParseFloat(f[12], 64)
		return ppid, u + s, true
	}
	var total float64
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		id, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if ppid, t, ok := ticks(string(stat)); ok && (id == pid || ppid == pid) {
			total += t
		}
	}
	return total / userHZ
}

// gatewaySetup reads the shipped configuration at path and makes a
// temporary directory and three free loopback ports (the app's, the gated
// front's and the gateway alone's) for a gateway scenario.
func gatewaySetup(name, path string) (conf []byte, dir string, ports [3]int, err error) {
	if conf, err = os.ReadFile(path); err != nil {
		return nil, "", ports, fmt.Errorf("read %s (run latchbench from the repository root): %w", path, err)
	}
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, "", ports, err
		}
	}
	if dir, err = os.MkdirTemp("", "latchbench-"+name+"-"); err != nil {
		return nil, "", ports, err
	}
	return conf, dir, ports, nil
}

// startNginx runs nginx with the shipped configuration in front of the
// Latchkey at latchkey, and returns the URLs of nginx alone and of the
// gated location.
func startNginx(ctx context.Context, bin, latchkey string) (gateway, error) {
	conf, dir, ports, err := gatewaySetup("nginx", filepath.Join("deploy", "nginx", "nginx.conf"))
	if err != nil {
		return gateway{}, err
	}
	lk := strings.TrimPrefix(latchkey, "http://")
	tmp := filepath.Join(dir, "tmp")
	_ = os.MkdirAll(tmp, 0o755)
	extra := fmt.Sprintf(`http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    server { listen 127.0.0.1:%[2]d; location / { return 200 "hello from the app\n"; } }
    server { listen 127.0.0.1:%[3]d; location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; } }`, tmp, ports[0], ports[2])
	c := strings.NewReplacer("server 127.0.0.1:8080;", "server "+lk+";",
		"server 127.0.0.1:3000;", fmt.Sprintf("server 127.0.0.1:%d;", ports[0]),
		"listen 127.0.0.1:8000;", fmt.Sprintf("listen 127.0.0.1:%d;", ports[1]),
		"\nhttp {", "\n"+extra).Replace(string(conf))
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(c), 0o644); err != nil {
		return gateway{}, err
	}
	global := fmt.Sprintf("daemon off; master_process on; worker_processes auto; pid %s/nginx.pid; error_log %s/error.log warn;", dir, dir)
	cmd := exec.Command(bin, "-p", tmp, "-c", path, "-g", global)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return launchGateway(ctx, "nginx", cmd, dir, ports, nil)
}

// startCaddy runs Caddy with the shipped deploy/caddy/Caddyfile in front of
// the Latchkey at latchkey, plus two sites of its own: the app ("hello from
// the app") and the same app behind reverse_proxy without forward_auth
// (Caddy keeps its upstream connections by default). It returns the URLs
// of Caddy alone and of the gated site.
func startCaddy(ctx context.Context, bin, latchkey string) (gateway, error) {
	conf, dir, ports, err := gatewaySetup("caddy", filepath.Join("deploy", "caddy", "Caddyfile"))
	if err != nil {
		return gateway{}, err
	}
	c := string(conf) + fmt.Sprintf(`
http://127.0.0.1:%[1]d {
	respond "hello from the app" 200
}

http://127.0.0.1:%[2]d {
	reverse_proxy 127.0.0.1:%[1]d
}
`, ports[0], ports[2])
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(c), 0o644); err != nil {
		return gateway{}, err
	}
	cmd := exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "LATCHKEY="+strings.TrimPrefix(latchkey, "http://"),
		fmt.Sprintf("APP=127.0.0.1:%d", ports[0]), fmt.Sprintf("LISTEN=127.0.0.1:%d", ports[1]), "CADDY_ADMIN=off",
		"HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	return launchGateway(ctx, "caddy", cmd, dir, ports, &log)
}

// launchGateway starts a gateway scenario's cmd, whose files are in dir and
// which listens on ports (gatewaySetup's), and returns the gateway once its
// gated front answers with the gate's headers. log, when not nil, is the
// process's output, quoted when it does not answer.
func launchGateway(ctx context.Context, name string, cmd *exec.Cmd, dir string, ports [3]int, log *strings.Builder) (gateway, error) {
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return gateway{}, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	gw := gateway{
		alone: fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
		gated: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		pid:   cmd.Process.Pid,
		stop: func() {
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
			_ = os.RemoveAll(dir)
		},
	}
	if err := waitGated(ctx, gw.gated); err != nil {
		gw.stop()
		if log != nil {
			return gateway{}, fmt.Errorf("%s: %w; its output: %s", name, err, log.String())
		}
		return gateway{}, fmt.Errorf("%s: %w", name, err)
	}
	return gw, nil
}

// waitGated waits until the gated front at gated answers / with the gate's
// headers, for at most ten seconds.
func waitGated(ctx context.Context, gated string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gated+"/", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && resp.Header.Get("RateLimit") != "" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gated front does not answer with the gate's headers (%v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// electionAgainstLock notes the election's campaign/resign throughput as a
// ratio to the lock's acquire/release in the same run (the target is at
// least 0.9): of their ratios to the ceiling when both have them, with
// the server CPU per request of each.
func electionAgainstLock(results []Result) {
	var lock *Result
	for i := range results {
		if results[i].Scenario == "lock" && results[i].RPS > 0 {
			lock = &results[i]
		}
	}
	for i, r := range results {
		if r.Scenario != "election" || lock == nil || r.RPS == 0 {
			continue
		}
		note := fmt.Sprintf("%.2f× lock's requests a second (target ≥ 0.9)", r.RPS/lock.RPS)
		if r.RPSRatio > 0 && lock.RPSRatio > 0 {
			// Each against the ceiling rounds paired with it: steadier on a
			// machine whose speed drifts between the two scenarios.
			note = fmt.Sprintf("%.2f× lock's ratio to the ceiling (target ≥ 0.9; %.2f× its requests a second)",
				r.RPSRatio/lock.RPSRatio, r.RPS/lock.RPS)
		}
		if r.Requests > 0 && lock.Requests > 0 && r.Usage.ServerCPUSeconds > 0 && lock.Usage.ServerCPUSeconds > 0 {
			us := r.Usage.ServerCPUSeconds / float64(r.Requests) * 1e6
			lus := lock.Usage.ServerCPUSeconds / float64(lock.Requests) * 1e6
			note += fmt.Sprintf("; server CPU per request %.1f µs against lock's %.1f (%.2f×)", us, lus, us/lus)
		}
		results[i].Notes = append(results[i].Notes, note)
	}
}
