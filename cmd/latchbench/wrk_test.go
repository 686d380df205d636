package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// wrkOutput is what wrk prints with report.lua: its own summary, then
// report.lua's lines.
func wrkOutput(requests, durationUS int, p50, p90, p99, p999 int, extra ...string) string {
	return fmt.Sprintf(`Running 2s test @ http://127.0.0.1:4000/
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.10ms    1.02ms  21.33ms   81.21%%
    Req/Sec    15.12k     1.01k   17.20k    70.00%%
  %d requests in 2.00s, 3.11MB read
Requests/sec:  15000.00
Transfer/sec:      1.55MB
latchbench requests %d
latchbench duration_us %d
latchbench errors 0 1 0 2
latchbench status_errors 0
latchbench latency_us 50 %d
latchbench latency_us 90 %d
latchbench latency_us 99 %d
latchbench latency_us 99.9 %d
`, requests, requests, durationUS, p50, p90, p99, p999) + strings.Join(extra, "\n")
}

func mustParseWrk(t *testing.T, out string) wrkRun {
	t.Helper()
	r, err := parseWrk(out)
	if err != nil {
		t.Fatalf("parseWrk: %v", err)
	}
	return r
}

func TestParseWrk(t *testing.T) {
	got := mustParseWrk(t, wrkOutput(30000, 2000000, 1800, 3100, 6400, 12100,
		"latchbench status 201 14000", "latchbench status 204 13990", "latchbench status 201 10",
		"latchbench status 409 5", "latchbench unreleased /v1/locks/bench-7 tok-a", "latchbench unreleased /v1/locks/bench-9 tok-b"))
	want := wrkRun{Requests: 30000, Seconds: 2, Errors: 3, Statuses: map[int]int{201: 14010, 204: 13990, 409: 5},
		P50MS: 1.8, P90MS: 3.1, P99MS: 6.4, P999MS: 12.1,
		Unreleased: []wrkLease{{"/v1/locks/bench-7", "tok-a"}, {"/v1/locks/bench-9", "tok-b"}}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(wrkLease{})); diff != "" {
		t.Errorf("parseWrk (-want +got):\n%s", diff)
	}
	if rps := got.RPS(); rps != 15000 {
		t.Errorf("RPS = %v, want 15000", rps)
	}

	for _, tt := range []struct{ desc, out string }{
		{"wrk's own output only", "Running 2s test @ http://127.0.0.1:4000/\nRequests/sec:  15000.00\n"},
		{"no percentiles", "latchbench requests 10\nlatchbench duration_us 1000000\n"},
		{"a malformed count", strings.Replace(wrkOutput(10, 1000000, 1, 2, 3, 4), "requests 10", "requests ten", 1)},
		{"a short errors line", strings.Replace(wrkOutput(10, 1000000, 1, 2, 3, 4), "errors 0 1 0 2", "errors 0 1", 1)},
		{"an unreleased lease without a token", wrkOutput(10, 1000000, 1, 2, 3, 4, "latchbench unreleased /v1/locks/x")},
	} {
		if _, err := parseWrk(tt.out); err == nil {
			t.Errorf("%s: parseWrk gave no error", tt.desc)
		}
	}
}

// A wrk scenario's rounds add up to one Result: requests, time and errors
// summed, each ratio the median of the rounds' against the ceiling run
// just before each, with the range of the throughput ratios, and each
// latency percentile the median of the rounds'.
func TestWrkPairedAggregatesRounds(t *testing.T) {
	ceilings := []wrkRun{
		mustParseWrk(t, wrkOutput(40000, 2000000, 1000, 2000, 4000, 8000)), // 20,000 req/s
		mustParseWrk(t, wrkOutput(20000, 2000000, 2000, 4000, 8000, 9000)), // 10,000
		mustParseWrk(t, wrkOutput(30000, 2000000, 1000, 2000, 5000, 9000)), // 15,000
	}
	rounds := []wrkRun{
		mustParseWrk(t, wrkOutput(24000, 2000000, 1500, 3000, 6000, 9000)),                               // 0.60; p99 1.5×
		mustParseWrk(t, wrkOutput(8000, 2000000, 3000, 6000, 8000, 9500, "latchbench status_errors 12")), // 0.40; 1.0×
		mustParseWrk(t, wrkOutput(21000, 2000000, 2000, 4000, 10000, 12000)),                             // 0.70; 2.0×
	}
	got := wrkPaired("gate", ceilings, rounds)
	want := Result{Scenario: "gate", Driver: driverWrk, Requests: 53000, Seconds: 6, RPS: 53000.0 / 6, Errors: 9,
		Non2xx: map[string]int{">399": 12}, P50MS: 2, P90MS: 4, P99MS: 8, P999MS: 9.5,
		RPSRatio: 0.6, P99Ratio: 1.5, RoundRPSRatios: []float64{0.6, 0.4, 0.7}, RPSRatioMin: 0.4, RPSRatioMax: 0.7}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return fmt.Sprintf("%.9f", a) == fmt.Sprintf("%.9f", b) })); diff != "" {
		t.Errorf("wrkPaired (-want +got):\n%s", diff)
	}

	// A cycle script counts statuses itself: its non-2xx are by code.
	cycle := wrkPaired("lock", ceilings[:1], []wrkRun{
		mustParseWrk(t, wrkOutput(10000, 2000000, 1, 2, 3, 4, "latchbench status 201 5000", "latchbench status 204 4990", "latchbench status 409 10")),
	})
	if diff := cmp.Diff(map[string]int{"409": 10}, cycle.Non2xx); diff != "" {
		t.Errorf("cycle's non-2xx (-want +got):\n%s", diff)
	}
	if cycle.RPSRatioMin != 0.25 || cycle.RPSRatioMax != 0.25 || cycle.RPSRatio != 0.25 {
		t.Errorf("one round: ratio %v [%v–%v], want 0.25 [0.25–0.25]", cycle.RPSRatio, cycle.RPSRatioMin, cycle.RPSRatioMax)
	}

	// The ceiling row alone has no rounds to rank.
	alone := wrkPaired("ceiling", nil, ceilings[:1])
	if alone.RPS != 20000 || alone.RoundRPSRatios != nil || alone.RPSRatio != 0 {
		t.Errorf("ceiling alone: %v req/s, ratios %v (median %v), want 20000 req/s and none", alone.RPS, alone.RoundRPSRatios, alone.RPSRatio)
	}
	if got := ratioRange(alone); got != "-" {
		t.Errorf("ratioRange without rounds = %q, want -", got)
	}
	if got := ratioRange(got); got != "[0.40–0.70]" {
		t.Errorf("ratioRange = %q, want [0.40–0.70]", got)
	}
}

func TestSetRoundRatios(t *testing.T) {
	var res Result
	setRoundRatios(&res, []float64{0.62, 0.55, 0.71, 0.60}, []float64{1.1, 0.9, 1.3, 1.0})
	if res.RPSRatio != 0.61 || res.RPSRatioMin != 0.55 || res.RPSRatioMax != 0.71 || res.P99Ratio != 1.05 {
		t.Errorf("ratio %v [%v–%v], p99 %v; want 0.61 [0.55–0.71], 1.05", res.RPSRatio, res.RPSRatioMin, res.RPSRatioMax, res.P99Ratio)
	}
}

// mustWrk returns a wrk driver with the embedded scripts written out, or
// skips the test when there is no wrk.
func mustWrk(t *testing.T) *wrkDriver {
	t.Helper()
	bin, err := exec.LookPath("wrk")
	if err != nil {
		t.Skip("no wrk on the PATH (Debian: apt-get install wrk)")
	}
	d, err := newWrkDriver(bin, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	return d
}

// fakeLeases is a server of leases for cycle.lua: POST grants a new token
// at any path, DELETE gives back one the path was granted.
type fakeLeases struct {
	mu       sync.Mutex
	held     map[string]string // token → path
	bodies   map[string]int
	paths    map[string]int
	granted  int
	released int
	bad      []string // releases with a token the path does not hold
}

func (f *fakeLeases) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.Method {
	case http.MethodPost:
		var body struct{ N int }
		if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&body) != nil {
			w.WriteHeader(http.StatusUnsupportedMediaType)
			return
		}
		f.granted++
		f.bodies[fmt.Sprint(body.N)]++
		f.paths[r.URL.Path]++
		token := fmt.Sprintf("tok-%d", f.granted)
		f.held[token] = r.URL.Path
		w.Header().Set("Lock-Token", token)
		w.Header().Set("Location", r.URL.Path)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"granted":true}`)
	case http.MethodDelete:
		token := r.Header.Get("Lock-Token")
		if f.held[token] != r.URL.Path {
			f.bad = append(f.bad, r.URL.Path+" "+token)
			w.WriteHeader(http.StatusConflict)
			return
		}
		delete(f.held, token)
		f.released++
		w.WriteHeader(http.StatusNoContent)
	}
}

// cycle.lua chains each granted acquire's release with the answer's token
// and Location, counts every request, and reports the leases it still
// held at the end; no release carries a token its path was not granted.
func TestWrkCycleScriptChainsReleases(t *testing.T) {
	d := mustWrk(t)
	f := &fakeLeases{held: map[string]string{}, bodies: map[string]int{}, paths: map[string]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)

	const conns = 4
	run, err := d.run(t.Context(), srv.URL, conns, time.Second, *wrkCycle("/v1/locks/x-", 3, `{"n":1}`, `{"n":2}`))
	if err != nil {
		t.Fatal(err)
	}
	srv.CloseClientConnections()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bad) > 0 {
		t.Fatalf("%d releases with a token the path was not granted, e.g. %q", len(f.bad), f.bad[0])
	}
	if f.granted == 0 || f.released == 0 {
		t.Fatalf("%d granted, %d released: want both", f.granted, f.released)
	}
	// Each request is counted: wrk's statuses are the server's answers,
	// less those still in flight when wrk stopped (one a connection).
	answered := f.granted + f.released
	if counted := run.Statuses[201] + run.Statuses[204]; counted > answered || counted < answered-conns ||
		run.Statuses[201] > f.granted || run.Statuses[204] > f.released {
		t.Errorf("wrk counted %d grants and %d releases, the server made %d and %d (at most %d in flight)",
			run.Statuses[201], run.Statuses[204], f.granted, f.released, conns)
	}
	if run.Requests != run.Statuses[201]+run.Statuses[204] || run.Errors != 0 {
		t.Errorf("%d requests, %d errors, statuses %v: want every request a 201 or 204", run.Requests, run.Errors, run.Statuses)
	}
	// Every lease granted and answered is released by wrk or reported.
	if left := len(f.held) - len(run.Unreleased); left < 0 || left > conns {
		t.Errorf("%d leases held at the end, %d reported unreleased: want at most %d unreported (in flight)", len(f.held), len(run.Unreleased), conns)
	}
	for _, l := range run.Unreleased {
		if f.held[l.token] != l.path {
			t.Errorf("reported unreleased %s %s, which the server does not hold", l.path, l.token)
		}
	}
	if len(f.bodies) != 2 || len(f.paths) != 3 {
		t.Errorf("bodies %v, paths %v: want both bodies and the three names", f.bodies, f.paths)
	}
}

// gate.lua rotates its client IPs (and API keys) and check.lua its keys;
// both send the requests latchbench's Go client sends.
func TestWrkScriptsRotateKeys(t *testing.T) {
	d := mustWrk(t)
	var mu sync.Mutex
	seen := map[string]int{}
	var wrong []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var key string
		switch r.URL.Path {
		case "/v1/ratelimit/gate/bench3":
			ip := r.Header.Get("X-Forwarded-For")
			var n uint64
			if _, err := fmt.Sscanf(r.Header.Get("X-Api-Key"), "key-%d", &n); err != nil || clientIP(n) != ip {
				key = "wrong: " + ip + " " + r.Header.Get("X-Api-Key")
			} else {
				key = ip
			}
		case "/v1/ratelimit/check":
			var body struct{ Policy, Key string }
			if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&body) != nil || body.Policy != "bench" {
				key = "wrong: check body"
			} else {
				key = body.Key
			}
		default:
			key = "wrong: " + r.URL.Path
		}
		mu.Lock()
		if strings.HasPrefix(key, "wrong") {
			wrong = append(wrong, key)
		}
		seen[key]++
		mu.Unlock()
	})
	b := &bench{ips: 50, checkPolicy: "bench"}
	var check *wrkLoad
	for _, sc := range b.scenarios() {
		if sc.name == "check" {
			check = sc.wrk
		}
	}
	for _, load := range []*wrkLoad{b.wrkGate("bench3", true), check} {
		mu.Lock()
		clear(seen)
		mu.Unlock()
		// A server of its own for each load, closed (every request it was
		// still answering done) before the keys are counted: a request of
		// one load is never counted with the next.
		srv := httptest.NewServer(handler)
		run, err := d.run(t.Context(), srv.URL, 4, time.Second, *load)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(wrong) > 0 {
			t.Errorf("%s: %d requests unlike the Go client's, e.g. %q", load.script, len(wrong), wrong[0])
		}
		if run.Requests == 0 || len(seen) != 50 || run.Errors != 0 {
			t.Errorf("%s: %d requests, %d errors, over %d keys: want 50 keys", load.script, run.Requests, run.Errors, len(seen))
		}
		mu.Unlock()
	}
}

// With -wrk against -start, every row wrk can drive is driven by it, and
// its requests succeed.
func TestRunWithWrk(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and a server")
	}
	bin, err := exec.LookPath("wrk")
	if err != nil {
		t.Skip("no wrk on the PATH (Debian: apt-get install wrk)")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server on the PATH")
	}
	out := filepath.Join(t.TempDir(), "bench.json")
	t.Chdir(filepath.Join("..", ".."))
	var text strings.Builder
	err = run(t.Context(), []string{"-start", "-wrk", bin, "-scenarios", "gate,check,lock,semaphore",
		"-c", "4", "-d", "1s", "-rounds", "1", "-warmup", "0", "-json", out}, &text)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, text.String())
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rep.Results {
		names = append(names, r.Scenario)
		if r.Driver != driverWrk || r.Requests == 0 || r.Errors != 0 || len(r.Non2xx) > 0 {
			t.Errorf("%s: by %s, %d requests, %d errors, non-2xx %v: want wrk's, some, and no error", r.Scenario, r.Driver, r.Requests, r.Errors, r.Non2xx)
		}
		if r.Scenario != "ceiling" && len(r.RoundRPSRatios) != 1 {
			t.Errorf("%s: round ratios %v, want one", r.Scenario, r.RoundRPSRatios)
		}
	}
	if diff := cmp.Diff([]string{"ceiling", "gate", "check", "lock", "semaphore"}, names); diff != "" {
		t.Errorf("rows (-want +got):\n%s\n%s", diff, text.String())
	}
}

// After a run, settle gives back the leases the run reported and waits
// until every path it settles on is free.
func TestWrkSettleReleasesAndWaits(t *testing.T) {
	var mu sync.Mutex
	var released []string
	inspects := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Method {
		case http.MethodDelete:
			released = append(released, r.URL.Path+" "+r.Header.Get("Lock-Token"))
			w.WriteHeader(http.StatusNoContent)
		case http.MethodGet:
			inspects[r.URL.Path]++
			switch n := inspects[r.URL.Path]; r.URL.Path {
			case "/v1/semaphores/s": // two polls in use, then free
				fmt.Fprintf(w, `{"name":"s","in_use":%d,"available":8}`, max(0, 3-n))
			case "/v1/rwlocks/r": // a reader, then free
				fmt.Fprintf(w, `{"name":"r","write_held":false,"readers":%d}`, max(0, 2-n))
			default:
				fmt.Fprint(w, `{"name":"l","held":false}`)
			}
		}
	}))
	t.Cleanup(srv.Close)
	d := &wrkDriver{}
	load := wrkLoad{settle: []string{"/v1/semaphores/s", "/v1/rwlocks/r", "/v1/locks/l"}}
	d.settle(t.Context(), srv.URL, load, wrkRun{Unreleased: []wrkLease{{"/v1/locks/l", "tok-1"}}})

	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"/v1/locks/l tok-1"}, released); diff != "" {
		t.Errorf("releases (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"/v1/semaphores/s": 3, "/v1/rwlocks/r": 2, "/v1/locks/l": 1}, inspects); diff != "" {
		t.Errorf("inspections until free (-want +got):\n%s", diff)
	}
}
