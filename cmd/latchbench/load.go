package main

import (
	"context"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"
)

// sample is one finished request.
type sample struct {
	latency time.Duration
	status  int // 0 for a transport error
}

// worker is one closed-loop client: it sends a request, waits for the answer,
// and sends the next, on its own keep-alive connection.
type worker struct {
	id      int
	client  *http.Client
	base    string
	samples []sample
	rnd     uint64
}

// next returns a pseudo-random number (xorshift), cheap and per worker.
func (w *worker) next() uint64 {
	w.rnd ^= w.rnd << 13
	w.rnd ^= w.rnd >> 7
	w.rnd ^= w.rnd << 17
	return w.rnd
}

// do sends one request and records it. It returns the response status and
// headers (nil on a transport error); the body is read and discarded unless
// keepBody.
func (w *worker) do(req *http.Request, keepBody bool) (int, http.Header, []byte) {
	start := time.Now()
	resp, err := w.client.Do(req)
	if err != nil {
		w.samples = append(w.samples, sample{latency: time.Since(start)})
		return 0, nil, nil
	}
	var body []byte
	if keepBody {
		body, _ = io.ReadAll(resp.Body)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	_ = resp.Body.Close()
	w.samples = append(w.samples, sample{latency: time.Since(start), status: resp.StatusCode})
	return resp.StatusCode, resp.Header, body
}

// record records one call that is not an HTTP request (a gRPC one),
// started at start, with the HTTP status it counts as (0: it failed).
func (w *worker) record(start time.Time, status int) {
	w.samples = append(w.samples, sample{latency: time.Since(start), status: status})
}

// runLoad runs op on conns workers for d and returns every sample and the
// time until the last iteration ended. Each worker has its own transport so
// it keeps exactly one connection.
func runLoad(ctx context.Context, base string, conns int, d time.Duration, op func(context.Context, *worker)) ([]sample, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	workers := make([]*worker, conns)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range workers {
		tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true}
		w := &worker{id: i, base: base, rnd: uint64(i)*0x9E3779B97F4A7C15 + 1,
			client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tr.CloseIdleConnections()
			// An iteration that has started runs to its end: cutting its
			// requests off would leave a granted lock unreleased, holding
			// its name for its whole TTL into the next phase.
			opCtx := context.WithoutCancel(ctx)
			for ctx.Err() == nil {
				op(opCtx, w)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []sample
	for _, w := range workers {
		all = append(all, w.samples...)
	}
	return all, elapsed
}

// Result is one scenario's measurements.
type Result struct {
	Scenario string         `json:"scenario"`
	Requests int            `json:"requests"`
	Seconds  float64        `json:"seconds"`
	RPS      float64        `json:"rps"`
	P50MS    float64        `json:"p50_ms"`
	P90MS    float64        `json:"p90_ms"`
	P99MS    float64        `json:"p99_ms"`
	P999MS   float64        `json:"p999_ms"`
	Errors   int            `json:"errors"`
	Non2xx   map[string]int `json:"non_2xx,omitempty"`
	RPSRatio float64        `json:"rps_ratio_to_ceiling"`
	P99Ratio float64        `json:"p99_ratio_to_ceiling"`
	// RoundRPSRatios are the throughput ratios of each paired round, whose
	// median is RPSRatio.
	RoundRPSRatios []float64 `json:"rps_ratio_by_round,omitempty"`
	// RPSRatioMin and RPSRatioMax are the lowest and highest of them.
	RPSRatioMin float64 `json:"rps_ratio_min,omitempty"`
	RPSRatioMax float64 `json:"rps_ratio_max,omitempty"`
	// Driver is the load generator that sent the requests: driverGo or
	// driverWrk.
	Driver      string `json:"load_generator"`
	Description string `json:"description"`
	Usage       usage  `json:"usage"`
	// CeilingCPUus is the CPU a request (the server's, Redis's and the
	// load generator's, µs) of the ceiling rounds paired with this
	// scenario's; 0 for a scenario without them.
	CeilingCPUus float64  `json:"paired_ceiling_cpu_us_per_request,omitempty"`
	Notes        []string `json:"notes,omitempty"`
}

// The load generators a Result names.
const (
	driverGo  = "latchbench"
	driverWrk = "wrk"
)

// summarize turns samples into a Result. Requests cancelled by the end of
// the run (transport errors after the deadline) are not counted as errors.
func summarize(name string, samples []sample, elapsed time.Duration) Result {
	r := Result{Scenario: name, Seconds: elapsed.Seconds(), Non2xx: map[string]int{}}
	lat := make([]time.Duration, 0, len(samples))
	for _, s := range samples {
		switch {
		case s.status == 0:
			r.Errors++
			continue
		case s.status < 200 || s.status > 299:
			r.Non2xx[strconv.Itoa(s.status)]++
		}
		lat = append(lat, s.latency)
	}
	r.Requests = len(lat)
	if elapsed > 0 {
		r.RPS = float64(r.Requests) / elapsed.Seconds()
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		i := int(p * float64(len(lat)-1))
		return float64(lat[i].Microseconds()) / 1000
	}
	r.P50MS, r.P90MS, r.P99MS, r.P999MS = q(0.50), q(0.90), q(0.99), q(0.999)
	if len(r.Non2xx) == 0 {
		r.Non2xx = nil
	}
	return r
}
