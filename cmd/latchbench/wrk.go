package main

import (
	"bufio"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// wrkScripts are the Lua scripts wrk runs: one per kind of load, each
// written out with wrk/report.lua appended, whose done() prints the
// figures parseWrk reads.
//
//go:embed wrk/*.lua
var wrkScripts embed.FS

// wrkLoad is how wrk drives a scenario: one of wrkScripts, its arguments
// (after wrk's --), and the path of the URL wrk is given (the request
// itself for plain.lua; the other scripts build their own requests).
type wrkLoad struct {
	script string
	path   string
	args   []string
	// settle are the leases' paths that must be free before the next run
	// (see settle); none for a load of many names.
	settle []string
}

// wrkCeiling is the ceiling's load under wrk: GET /healthz.
var wrkCeiling = wrkLoad{script: "plain.lua", path: "/healthz"}

// wrkDriver runs the wrk binary bin with threads threads (at most one per
// connection), the scripts written out in dir.
type wrkDriver struct {
	bin     string
	threads int
	dir     string
}

// newWrkDriver writes the scripts to a temporary directory, which close
// removes. Returns an error if bin is not an executable file.
func newWrkDriver(bin string, threads int) (*wrkDriver, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("-wrk %s: %w", bin, err)
	}
	dir, err := os.MkdirTemp("", "latchbench-wrk-")
	if err != nil {
		return nil, err
	}
	report, err := wrkScripts.ReadFile("wrk/report.lua")
	if err != nil {
		return nil, err
	}
	entries, err := wrkScripts.ReadDir("wrk")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.Name() == "report.lua" {
			continue
		}
		src, err := wrkScripts.ReadFile("wrk/" + e.Name())
		if err != nil {
			return nil, err
		}
		src = append(append(src, '\n'), report...)
		if err := os.WriteFile(filepath.Join(dir, e.Name()), src, 0o644); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	return &wrkDriver{bin: path, threads: threads, dir: dir}, nil
}

func (d *wrkDriver) close() { _ = os.RemoveAll(d.dir) }

// threadsFor is how many threads wrk runs for conns connections: no more
// than connections, as wrk requires.
func (d *wrkDriver) threadsFor(conns int) int { return min(d.threads, conns) }

// wrkSeconds is d in the whole seconds wrk's -d takes: rounded, at least 1.
func wrkSeconds(d time.Duration) int {
	return max(1, int(math.Round(d.Seconds())))
}

// wrkRun is what one run of wrk measured, read from report.lua's lines.
type wrkRun struct {
	Requests int
	Seconds  float64
	// Errors are socket errors (connect, read, write) and timeouts.
	Errors int
	// StatusErrors are answers with a status above 399.
	StatusErrors int
	// Statuses are the answers by status, when the script counts them
	// (the cycle scripts do; the others leave wrk parsing no header).
	Statuses                    map[int]int
	P50MS, P90MS, P99MS, P999MS float64
	// Unreleased are leases the run was granted and had not released
	// when it ended.
	Unreleased []wrkLease
	// CPUSeconds is wrk's own user and system CPU.
	CPUSeconds float64
}

// wrkLease is a lease a cycle script holds: its path and token.
type wrkLease struct{ path, token string }

// RPS is the run's requests a second.
func (r wrkRun) RPS() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Seconds
}

// parseWrk reads the figures report.lua's done() prints among wrk's own
// output. Returns an error when requests, duration or a percentile is
// missing, or a figure is malformed.
func parseWrk(out string) (wrkRun, error) {
	var r wrkRun
	var haveRequests, haveDuration bool
	percentiles := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "latchbench" {
			continue
		}
		ints := func(want int) ([]int, error) {
			if len(f) != 2+want {
				return nil, fmt.Errorf("wrk output: %q: want %d values", sc.Text(), want)
			}
			vs := make([]int, want)
			for i := range vs {
				v, err := strconv.Atoi(f[2+i])
				if err != nil {
					return nil, fmt.Errorf("wrk output: %q: %w", sc.Text(), err)
				}
				vs[i] = v
			}
			return vs, nil
		}
		var vs []int
		var err error
		switch f[1] {
		case "requests":
			vs, err = ints(1)
			if err == nil {
				r.Requests, haveRequests = vs[0], true
			}
		case "duration_us":
			vs, err = ints(1)
			if err == nil {
				r.Seconds, haveDuration = float64(vs[0])/1e6, true
			}
		case "errors":
			vs, err = ints(4)
			if err == nil {
				r.Errors = vs[0] + vs[1] + vs[2] + vs[3]
			}
		case "status_errors":
			vs, err = ints(1)
			if err == nil {
				r.StatusErrors = vs[0]
			}
		case "status":
			vs, err = ints(2)
			if err == nil {
				if r.Statuses == nil {
					r.Statuses = map[int]int{}
				}
				r.Statuses[vs[0]] += vs[1]
			}
		case "latency_us":
			if len(f) != 4 {
				return wrkRun{}, fmt.Errorf("wrk output: %q: want a percentile and a value", sc.Text())
			}
			us, perr := strconv.ParseFloat(f[3], 64)
			if perr != nil {
				return wrkRun{}, fmt.Errorf("wrk output: %q: %w", sc.Text(), perr)
			}
			ms := us / 1000
			switch f[2] {
			case "50":
				r.P50MS = ms
			case "90":
				r.P90MS = ms
			case "99":
				r.P99MS = ms
			case "99.9":
				r.P999MS = ms
			default:
				continue
			}
			percentiles++
		case "unreleased":
			if len(f) != 4 {
				return wrkRun{}, fmt.Errorf("wrk output: %q: want a path and a token", sc.Text())
			}
			r.Unreleased = append(r.Unreleased, wrkLease{path: f[2], token: f[3]})
		}
		if err != nil {
			return wrkRun{}, err
		}
	}
	if !haveRequests || !haveDuration || percentiles != 4 {
		return wrkRun{}, errors.New("wrk output lacks latchbench's figures (requests, duration_us and four latency_us lines)")
	}
	return r, nil
}

// run runs wrk for d (in whole seconds) with conns connections against
// base+load.path, and returns what it measured. Returns an error if wrk
// fails or prints no figures.
func (d *wrkDriver) run(ctx context.Context, base string, conns int, dur time.Duration, load wrkLoad) (wrkRun, error) {
	secs := wrkSeconds(dur)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	args := []string{"-t", strconv.Itoa(d.threadsFor(conns)), "-c", strconv.Itoa(conns), "-d", strconv.Itoa(secs) + "s",
		// The waiting scenarios wait up to 2 s in the server: wrk's own
		// default timeout is 2 s, the Go client's 30 s.
		"--timeout", "30s",
		"-s", filepath.Join(d.dir, load.script), base + load.path}
	if len(load.args) > 0 {
		args = append(append(args, "--"), load.args...)
	}
	cmd := exec.CommandContext(ctx, d.bin, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return wrkRun{}, fmt.Errorf("wrk %s: %w: %s", load.script, err, lastLines(stderr.String()+stdout.String(), 5))
	}
	r, err := parseWrk(stdout.String())
	if err != nil {
		return wrkRun{}, fmt.Errorf("wrk %s: %w: %s", load.script, err, lastLines(stderr.String()+stdout.String(), 5))
	}
	if ps := cmd.ProcessState; ps != nil {
		r.CPUSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	return r, nil
}

// release gives back the leases a run left held, so that they do not hold
// their names (or a semaphore's permits) for their TTL into the next run.
// These requests are not measured.
func (d *wrkDriver) release(ctx context.Context, base string, leases []wrkLease) {
	client := &http.Client{Timeout: 10 * time.Second}
	for _, l := range leases {
		req := newRequest(ctx, http.MethodDelete, base+l.path, "")
		req.Header.Set("Lock-Token", l.token)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	client.CloseIdleConnections()
}

// settleTimeout bounds settle's wait: longer than the TTL (5 s) of the
// leases of every load that settles.
const settleTimeout = 7 * time.Second

// settle gives back the leases run r of load left held and waits, for at
// most settleTimeout, until every path of load.settle is free. wrk stops
// in the middle of its requests: a grant whose answer it did not read, or a
// release it sent that the server dropped with the connection, holds its
// lease for its TTL, and on a few names (contended, rwlock, semaphore) the
// next run's waits would queue behind it. The Go client finishes every
// iteration it began instead. These requests are not measured.
func (d *wrkDriver) settle(ctx context.Context, base string, load wrkLoad, r wrkRun) {
	d.release(ctx, base, r.Unreleased)
	deadline := time.Now().Add(settleTimeout)
	for _, path := range load.settle {
		for ctx.Err() == nil && time.Now().Before(deadline) && !leaseFree(ctx, base+path) {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// leaseFree says whether the lock, read/write lock or semaphore at url is
// held by no one, by its inspect answer (held, write_held, readers,
// in_use).
func leaseFree(ctx context.Context, url string) bool {
	resp, err := http.DefaultClient.Do(newRequest(ctx, http.MethodGet, url, ""))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st struct {
		Held      bool `json:"held"`
		WriteHeld bool `json:"write_held"`
		Readers   int  `json:"readers"`
		InUse     int  `json:"in_use"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return false
	}
	return !st.Held && !st.WriteHeld && st.Readers == 0 && st.InUse == 0
}

// runSettle is run, then settle.
func (d *wrkDriver) runSettle(ctx context.Context, base string, conns int, dur time.Duration, load wrkLoad) (wrkRun, error) {
	r, err := d.run(ctx, base, conns, dur, load)
	d.settle(ctx, base, load, r)
	return r, err
}

// wrkPaired sums a scenario's wrk runs into its Result. rounds[i] is paired
// with ceilings[i], the ceiling (or the gateway alone) run just before it;
// a round without a ceiling, or either of them without a request, gives no
// ratio. Requests, errors and statuses add up; throughput is all requests
// over all the rounds' time; each latency percentile is the median of the
// rounds' (wrk reports each run's, not its samples); the ratios are the
// median of the rounds', with the range of the throughput ratios.
func wrkPaired(name string, ceilings, rounds []wrkRun) Result {
	res := Result{Scenario: name, Driver: driverWrk, Non2xx: map[string]int{}}
	var p50, p90, p99, p999, rpsRatios, p99Ratios []float64
	for i, r := range rounds {
		res.Requests += r.Requests
		res.Seconds += r.Seconds
		res.Errors += r.Errors
		if r.Statuses != nil {
			for code, n := range r.Statuses {
				if code < 200 || code > 299 {
					res.Non2xx[strconv.Itoa(code)] += n
				}
			}
		} else if r.StatusErrors > 0 {
			res.Non2xx[">399"] += r.StatusErrors
		}
		if r.Requests == 0 {
			continue
		}
		p50, p90, p99, p999 = append(p50, r.P50MS), append(p90, r.P90MS), append(p99, r.P99MS), append(p999, r.P999MS)
		if i < len(ceilings) && ceilings[i].RPS() > 0 && r.RPS() > 0 {
			rpsRatios = append(rpsRatios, r.RPS()/ceilings[i].RPS())
			if ceilings[i].P99MS > 0 {
				p99Ratios = append(p99Ratios, r.P99MS/ceilings[i].P99MS)
			}
		}
	}
	if res.Seconds > 0 {
		res.RPS = float64(res.Requests) / res.Seconds
	}
	res.P50MS, res.P90MS, res.P99MS, res.P999MS = median(p50), median(p90), median(p99), median(p999)
	if len(res.Non2xx) == 0 {
		res.Non2xx = nil
	}
	if len(rpsRatios) > 0 {
		setRoundRatios(&res, rpsRatios, p99Ratios)
	}
	return res
}

// runWrkScenario is runScenario's closed loop driven by wrk: after a
// warm-up, the ceiling alone for the whole duration, or o.rounds paired
// rounds of the ceiling then the scenario, both under wrk, metered as
// runPaired meters them (wrk's CPU counted as the load generator's).
func runWrkScenario(ctx context.Context, o *options, sc scenario) (Result, error) {
	d, base := o.wrk, o.b.base
	if o.warmup > 0 {
		if _, err := d.runSettle(ctx, base, o.conns, o.warmup, *sc.wrk); err != nil {
			return Result{}, err
		}
	}
	if sc.name == "ceiling" {
		before := o.meter.read(ctx)
		run, err := d.run(ctx, base, o.conns, o.duration, *sc.wrk)
		if err != nil {
			return Result{}, err
		}
		res := wrkPaired(sc.name, nil, []wrkRun{run})
		res.Usage = o.meter.usage(before, o.meter.read(ctx), res.Requests)
		res.Usage.LoadgenCPUSeconds += run.CPUSeconds
		res.Description = sc.description
		return res, nil
	}
	slice := o.duration / time.Duration(o.rounds)
	var ceilings, rounds []wrkRun
	var used usage
	var paired pairedCeilings
	for r := 0; r < o.rounds && ctx.Err() == nil; r++ {
		start := o.meter.read(ctx)
		c, err := d.run(ctx, base, o.conns, slice, wrkCeiling)
		if err != nil {
			return Result{}, err
		}
		before := o.meter.read(ctx)
		cu := o.meter.usage(start, before, c.Requests)
		cu.LoadgenCPUSeconds += c.CPUSeconds
		paired.add(cu, c.Requests)
		s, err := d.run(ctx, base, o.conns, slice, *sc.wrk)
		if err != nil {
			return Result{}, err
		}
		u := o.meter.usage(before, o.meter.read(ctx), s.Requests)
		u.LoadgenCPUSeconds += s.CPUSeconds
		d.settle(ctx, base, *sc.wrk, s) // after the reading: not measured
		used = addUsage(used, u, r == 0)
		ceilings, rounds = append(ceilings, c), append(rounds, s)
	}
	res := wrkPaired(sc.name, ceilings, rounds)
	res.Description = sc.description
	res.Usage = perRequest(used, res.Requests)
	res.CeilingCPUus = paired.perRequest()
	return res, nil
}

// runGatewayWrk is runGateway's paired rounds driven by wrk: gw alone,
// then gated, GET / each, with each side's CPU noted.
func (b *bench) runGatewayWrk(ctx context.Context, name string, gw gateway) (Result, error) {
	o := b.run
	slice := o.duration / time.Duration(o.rounds)
	root := wrkLoad{script: "plain.lua", path: "/"}
	var alones, gateds []wrkRun
	var cpu float64
	var parts gatewayCPU
	for r := 0; r < o.rounds && ctx.Err() == nil; r++ {
		t0 := b.cpuNow(ctx, gw)
		a, err := o.wrk.run(ctx, gw.alone, o.conns, slice, root)
		if err != nil {
			return Result{}, err
		}
		t1 := b.cpuNow(ctx, gw)
		g, err := o.wrk.run(ctx, gw.gated, o.conns, slice, root)
		if err != nil {
			return Result{}, err
		}
		parts.add(t0, t1, b.cpuNow(ctx, gw), a.Requests, g.Requests, a.CPUSeconds, g.CPUSeconds)
		alones, gateds = append(alones, a), append(gateds, g)
		cpu += a.CPUSeconds + g.CPUSeconds
	}
	res := wrkPaired(name, alones, gateds)
	var rps []float64
	for _, a := range alones {
		rps = append(rps, a.RPS())
	}
	res.Usage.LoadgenCPUSeconds = cpu
	res.Notes = append(res.Notes, fmt.Sprintf("ratio to %s alone (%.0f req/s, median of rounds), not to /healthz", name, median(rps)))
	res.Notes = append(res.Notes, parts.note(name)...)
	return res, nil
}
