package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{0.7}, 0.7},
		{[]float64{0.9, 0.5, 0.7}, 0.7},
		{[]float64{0.8, 0.5, 0.6, 0.9}, 0.7},
	} {
		in := append([]float64(nil), tt.in...)
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
		for i := range in {
			if in[i] != tt.in[i] {
				t.Fatalf("median reordered its input: %v, was %v", tt.in, in)
			}
		}
	}
}

// A paired scenario runs the ceiling and itself in every round, and reports
// the median of the rounds' ratios with its own requests only.
func TestRunPaired(t *testing.T) {
	var ceilingHits, scenarioHits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			ceilingHits.Add(1)
		case "/work":
			scenarioHits.Add(1)
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)
	get := func(path string) func(context.Context, *worker) {
		return func(ctx context.Context, w *worker) {
			w.do(newRequest(ctx, http.MethodGet, w.base+path, ""), false)
		}
	}
	// A round's ratio needs a request from the ceiling and the scenario
	// each: slices of 600ms (duration/rounds, for each of the two) leave
	// room for a machine too busy to start the load generator's workers at
	// once.
	o := &options{conns: 2, rounds: 3, duration: 1800 * time.Millisecond, ceilingOp: get("/healthz")}
	o.b.base, o.meter.base = srv.URL, srv.URL
	res := runPaired(t.Context(), o, scenario{name: "work", op: get("/work")})

	if len(res.RoundRPSRatios) != 3 {
		t.Fatalf("%d round ratios, want 3: %+v", len(res.RoundRPSRatios), res)
	}
	if res.RPSRatio != median(res.RoundRPSRatios) || res.RPSRatio <= 0 {
		t.Errorf("RPSRatio %v, want the median of %v", res.RPSRatio, res.RoundRPSRatios)
	}
	if res.P99Ratio <= 0 {
		t.Errorf("P99Ratio %v, want > 0", res.P99Ratio)
	}
	if int64(res.Requests) != scenarioHits.Load() || res.Non2xx["429"] != res.Requests {
		t.Errorf("%d requests (%v non-2xx) reported, the server saw %d of the scenario's", res.Requests, res.Non2xx, scenarioHits.Load())
	}
	if ceilingHits.Load() == 0 {
		t.Error("no ceiling request was sent in the rounds")
	}
	// The load generator's own CPU is summed over the rounds: it sent
	// requests in every one, so it used some.
	if res.Usage.LoadgenCPUSeconds <= 0 {
		t.Errorf("load generator CPU %v s over %d requests, want > 0", res.Usage.LoadgenCPUSeconds, res.Requests)
	}
}
