package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// usage is what a scenario cost the server and Redis.
type usage struct {
	ServerCPUSeconds  float64 `json:"server_cpu_seconds"`
	ServerRSSStartMiB float64 `json:"server_rss_start_mib"`
	ServerRSSEndMiB   float64 `json:"server_rss_end_mib"`
	HeapInuseEndMiB   float64 `json:"server_heap_inuse_end_mib"`
	RedisCommands     int64   `json:"redis_commands,omitempty"`
	RedisCPUSeconds   float64 `json:"redis_cpu_seconds,omitempty"`
	RedisCmdsPerReq   float64 `json:"redis_commands_per_request,omitempty"` // counting the commands scripts run
	// RedisNodes is what each node did: the one Redis, or each primary of a
	// cluster. RedisCommands and RedisCPUSeconds are their sums.
	RedisNodes []nodeUsage `json:"redis_nodes,omitempty"`
	// KeepaliveRenewals is how many keep-alive leases the server renewed.
	KeepaliveRenewals float64 `json:"keepalive_renewals,omitempty"`
	// LoadgenCPUSeconds is latchbench's own CPU: on a machine it shares with
	// the server and Redis, every microsecond it spends is one they lack.
	LoadgenCPUSeconds float64 `json:"loadgen_cpu_seconds"`
}

// snapshot is a reading of the counters usage is computed from.
type snapshot struct {
	serverCPU, rss, heapInuse float64
	renewals                  float64
	redis                     map[string]nodeSnapshot // by node address
	loadgenCPU                float64
}

// meter reads the server's /metrics and, when it knows Redis, INFO of
// every node.
type meter struct {
	base  string
	redis *redisNodes // nil when the Redis address is unknown
}

func (m *meter) read(ctx context.Context) snapshot {
	var s snapshot
	s.loadgenCPU = ownCPUSeconds()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.base+"/metrics", nil); err == nil {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				name, val, ok := strings.Cut(sc.Text(), " ")
				if !ok {
					continue
				}
				f, _ := strconv.ParseFloat(val, 64)
				switch name {
				case "process_cpu_seconds_total":
					s.serverCPU = f
				case "process_resident_memory_bytes":
					s.rss = f
				case "go_memstats_heap_inuse_bytes":
					s.heapInuse = f
				case "latchkey_keepalive_renewals_total":
					s.renewals = f
				}
			}
			resp.Body.Close()
		}
	}
	if m.redis != nil {
		s.redis = m.redis.read(ctx)
	}
	return s
}

func (m *meter) usage(before, after snapshot, requests int) usage {
	const mib = 1 << 20
	u := usage{
		ServerCPUSeconds:  after.serverCPU - before.serverCPU,
		ServerRSSStartMiB: before.rss / mib,
		ServerRSSEndMiB:   after.rss / mib,
		HeapInuseEndMiB:   after.heapInuse / mib,
		LoadgenCPUSeconds: after.loadgenCPU - before.loadgenCPU,
		KeepaliveRenewals: after.renewals - before.renewals,
	}
	if m.redis != nil {
		u.RedisNodes = nodeUsages(before.redis, after.redis)
		for _, n := range u.RedisNodes {
			u.RedisCommands += n.Commands
			u.RedisCPUSeconds += n.CPUSeconds
		}
		if requests > 0 {
			u.RedisCmdsPerReq = float64(u.RedisCommands) / float64(requests)
		}
	}
	return u
}

// ownCPUSeconds is the user and system CPU this process has used.
func ownCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// keepaliveReport reads the server's keep-alive metrics after a keepalive
// scenario: leases tracked, renewals, failures, and the renewal lag's p99
// (the upper bound of the histogram bucket holding it).
func (m *meter) keepaliveReport(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.base+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return []string{"metrics: " + err.Error()}
	}
	defer resp.Body.Close()
	var renewals, failures, leases, lagCount float64
	type bucket struct{ le, count float64 }
	var buckets []bucket
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		f, _ := strconv.ParseFloat(val, 64)
		switch {
		case name == "latchkey_keepalive_renewals_total":
			renewals = f
		case strings.HasPrefix(name, "latchkey_keepalive_renewal_failures_total"):
			failures += f
		case name == "latchkey_keepalive_leases":
			leases = f
		case name == "latchkey_keepalive_renewal_lag_seconds_count":
			lagCount = f
		case strings.HasPrefix(name, "latchkey_keepalive_renewal_lag_seconds_bucket{"):
			_, le, _ := strings.Cut(name, `le="`)
			le, _, _ = strings.Cut(le, `"`)
			bound, err := strconv.ParseFloat(le, 64)
			if err != nil || math.IsInf(bound, 1) {
				bound = -1
			}
			buckets = append(buckets, bucket{bound, f})
		}
	}
	p99 := "n/a"
	for _, b := range buckets {
		if lagCount > 0 && b.count >= 0.99*lagCount {
			if b.le < 0 {
				p99 = "above the largest bucket"
			} else {
				p99 = fmt.Sprintf("<= %gms", b.le*1000)
			}
			break
		}
	}
	return []string{fmt.Sprintf("keep-alive: %.0f leases tracked, %.0f renewals, %.0f renewal failures, renewal lag p99 %s",
		leases, renewals, failures, p99)}
}

// cpuBudget notes each scenario's CPU a request, the server's, Redis's and
// the load generator's, beside the ceiling's: that of the ceiling rounds
// paired with it when it has them (CeilingCPUus), else the ceiling row's
// when the load generator that drove it also drove the ceiling. On cores
// the three share, a closed loop runs at the rate their CPU allows: the
// ceiling's CPU a request over the scenario's is the ratio the CPU bounds it
// to, which is what a scenario must cut, and where, to reach a higher one.
// The paired rounds are the fairer figure: the ceiling's CPU a request
// falls as its rate rises, and the ceiling row runs in a spell of its own.
func cpuBudget(results []Result) {
	perRequest := func(r Result) (server, redis, loadgen float64, ok bool) {
		if r.Requests <= 0 || r.Usage.ServerCPUSeconds <= 0 || r.Usage.LoadgenCPUSeconds <= 0 {
			return 0, 0, 0, false
		}
		n := float64(r.Requests)
		return r.Usage.ServerCPUSeconds / n * 1e6, r.Usage.RedisCPUSeconds / n * 1e6, r.Usage.LoadgenCPUSeconds / n * 1e6, true
	}
	var ceiling float64
	var driver string
	for _, r := range results {
		if s, rd, l, ok := perRequest(r); ok && r.Scenario == "ceiling" {
			ceiling, driver = s+rd+l, r.Driver
		}
	}
	for i, r := range results {
		s, rd, l, ok := perRequest(r)
		// The gateways' ratio is to the gateway alone, and their note says
		// each side's CPU (gatewayCPU).
		if !ok || r.Scenario == "ceiling" || r.Scenario == "nginx" || r.Scenario == "caddy" {
			continue
		}
		against, what := r.CeilingCPUus, "its paired ceiling rounds'"
		if against <= 0 {
			if ceiling == 0 || r.Driver != driver {
				continue
			}
			against, what = ceiling, "the ceiling's"
		}
		results[i].Notes = append(results[i].Notes, fmt.Sprintf(
			"CPU a request: server %.1f µs, Redis %.1f µs, load generator %.1f µs: %.1f µs against %s %.1f (%.2f)",
			s, rd, l, s+rd+l, what, against, against/(s+rd+l)))
	}
}
