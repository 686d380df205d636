package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

func TestPanicIsAProblemWithoutStack(t *testing.T) {
	var logs syncBuffer
	fake := &fakeService{AcquireFn: func(context.Context, string, locks.AcquireRequest) (locks.Lease, error) {
		panic("boom: secret state 0xdeadbeef")
	}}
	req := newRequest(http.MethodPost, "/v1/locks/orders", "")
	rec := serveUnchecked(newTestRouter(t, fake, handlers.Config{Logger: newJSONLogger(&logs)}), req) // 500 is not in the spec
	p := wantProblem(t, rec, req, http.StatusInternalServerError, "internal")
	if p.Detail != "internal error" {
		t.Errorf("detail = %q, want %q", p.Detail, "internal error")
	}
	for _, leak := range []string{"boom", "deadbeef", "goroutine", ".go:"} {
		if strings.Contains(rec.Body.String(), leak) {
			t.Errorf("panic answer leaks %q: %s", leak, rec.Body)
		}
	}
	if !strings.Contains(logs.String(), "boom") {
		t.Errorf("the panic was not logged; logs:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newJSONLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestLogsHoldNoSecrets sends lease tokens and the admin key through every
// route and error path, and checks that the logs never contain them.
func TestLogsHoldNoSecrets(t *testing.T) {
	var logs syncBuffer
	fake := grantingService()
	fake.RenewFn = func(context.Context, string, string, time.Duration) (locks.Lease, error) {
		return locks.Lease{}, errors.New("something broke")
	}
	fake.ReleaseFn = func(context.Context, string, string) (locks.Released, error) {
		return locks.Released{}, store.ErrUnavailable
	}
	h := newTestRouter(t, fake, handlers.Config{Logger: newJSONLogger(&logs), AdminKey: adminKey})
	reqs := []*http.Request{
		newRequest(http.MethodPost, "/v1/locks/orders", `{"ttl":"10s"}`, "Lock-Token", tokenA),
		newRequest(http.MethodGet, "/v1/locks/orders", "", "Lock-Token", tokenA),
		newRequest(http.MethodPost, "/v1/locks/orders/renew", "", "Lock-Token", tokenA),        // 500
		newRequest(http.MethodDelete, "/v1/locks/orders", "", "Lock-Token", tokenA),            // 503
		newRequest(http.MethodPost, "/v1/locks/orders", "", "Lock-Token", tokenA+"+malformed"), // 400
		newRequest(http.MethodDelete, "/v1/locks/orders?force=true", "", "Authorization", "Bearer "+adminKey),
		newRequest(http.MethodDelete, "/v1/locks/orders?force=true", "", "Authorization", "Bearer "+adminKey+"-wrong"),
	}
	for _, req := range reqs {
		serveUnchecked(h, req) // some answers are deliberate 500s
	}
	out := logs.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	requests := 0
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec["msg"] != "request" {
			continue
		}
		requests++
		for _, key := range []string{"request_id", "route", "status", "duration_ms", "method"} {
			if _, ok := rec[key]; !ok {
				t.Errorf("request log line lacks %q: %s", key, line)
			}
		}
	}
	if requests != len(reqs) {
		t.Errorf("%d request log lines, want %d; logs:\n%s", requests, len(reqs), out)
	}
	for _, secret := range []string{tokenA, adminKey, "Bearer", "Authorization", "Lock-Token"} {
		if strings.Contains(out, secret) {
			t.Errorf("logs contain %q:\n%s", secret, out)
		}
	}
}

func TestMetrics(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	reg := prometheus.NewRegistry()
	st, err := store.New(rdb, store.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	lk, err := locks.New(st, locks.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	rl, err := ratelimit.New(st, ratelimit.Config{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	h := handlers.NewRouter(lk, rl, handlers.Config{Registry: reg})
	if rec := serve(t, h, newRequest(http.MethodPost, "/v1/locks/orders", "")); rec.Code != http.StatusCreated {
		t.Fatalf("acquire: %d %s", rec.Code, rec.Body)
	}
	serve(t, h, newRequest(http.MethodPost, "/v1/locks/orders", ""))                    // 409
	serve(t, h, newRequest(http.MethodDelete, "/v1/locks/orders?force=true", ""))       // 403
	serve(t, h, newRequest(http.MethodGet, "/v1/locks/never-seen-name-in-metrics", "")) // route label, not the name

	rec := serve(t, h, newRequest(http.MethodGet, "/metrics", ""))
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	body := rec.Body.String()
	for _, want := range []string{
		`latchkey_http_requests_total{method="POST",route="/v1/locks/{name}",status="201"} 1`,
		`latchkey_http_requests_total{method="POST",route="/v1/locks/{name}",status="409"} 1`,
		`latchkey_http_requests_total{method="DELETE",route="/v1/locks/{name}",status="403"} 1`,
		`latchkey_http_request_duration_seconds_count{method="POST",route="/v1/locks/{name}"} 2`,
		`latchkey_lock_grants_total{kind="new"} 1`,
		`latchkey_lock_conflicts_total 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, "never-seen-name-in-metrics") {
		t.Error("/metrics carries a lock name as a label value")
	}
}

// TestPanicIsCounted: a request that panicked is in the request metrics as
// the 500 it answered.
func TestPanicIsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	fake := &fakeService{AcquireFn: func(context.Context, string, locks.AcquireRequest) (locks.Lease, error) {
		panic("boom")
	}}
	h := newTestRouter(t, fake, handlers.Config{Registry: reg})
	serveUnchecked(h, newRequest(http.MethodPost, "/v1/locks/orders", "")) // 500 is not in the spec
	body := serve(t, h, newRequest(http.MethodGet, "/metrics", "")).Body.String()
	want := `latchkey_http_requests_total{method="POST",route="/v1/locks/{name}",status="500"} 1`
	if !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

// Probes (health, readiness, metrics scrapes) are logged at debug level when
// they succeed, so they do not drown the request log; API requests stay at info.
func TestProbeRequestsLogAtDebug(t *testing.T) {
	var logs syncBuffer
	fake := grantingService()
	fake.ReadyFn = func(context.Context) error { return nil }
	h := newTestRouter(t, fake, handlers.Config{Logger: newJSONLogger(&logs)})
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/locks/orders"} {
		serveUnchecked(h, newRequest(http.MethodGet, path, ""))
	}
	levels := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var entry struct{ Level, Msg, Route string }
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if entry.Msg == "request" {
			levels[entry.Route] = entry.Level
		}
	}
	want := map[string]string{"/healthz": "DEBUG", "/readyz": "DEBUG", "/metrics": "DEBUG", "/v1/locks/{name}": "INFO"}
	if diff := cmp.Diff(want, levels); diff != "" {
		t.Errorf("request log levels (-want +got):\n%s", diff)
	}
}

// TestMetricLabelsAreBounded: requests with 10,000 distinct methods and
// paths (the gate answers any method, the not-found handler any path) add
// no series once each kind of request has been seen: unknown methods count
// as OTHER, paths no route serves as "unmatched", lock and policy names
// only as their route's pattern.
func TestMetricLabelsAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newTestRouter(t, decisionFake(perIP(429), ratelimit.Decision{Allowed: true, Policy: "per-ip", Limit: 3}),
		handlers.Config{Registry: reg})
	send := func(method string, i int) {
		for _, path := range []string{
			"/nope/" + strconv.Itoa(i),                     // 404 not-found
			"/v1/ratelimit/gate/per-ip",                    // the gate's answer, for any method
			"/v1/ratelimit/gate/p" + strconv.Itoa(i),       // 404 policy-not-found
			"/v1/locks/name-" + strconv.Itoa(i) + "/renew", // 405
		} {
			serveUnchecked(h, newRequest(method, path, ""))
		}
	}
	series := func() (n int, methods map[string]bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		methods = map[string]bool{}
		for _, mf := range mfs {
			n += len(mf.GetMetric())
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "method" {
						methods[l.GetValue()] = true
					}
				}
			}
		}
		return n, methods
	}
	send("XM-first", -1)
	serveUnchecked(h, newRequest("PROPFIND", "/v1/ratelimit/gate/per-ip/some/path", ""))
	before, _ := series()
	for i := range 10_000 {
		send("XM"+strconv.Itoa(i), i)
	}
	after, methods := series()
	if after != before {
		t.Errorf("10,000 distinct methods and paths took the registry from %d series to %d", before, after)
	}
	if diff := cmp.Diff(map[string]bool{"OTHER": true}, methods); diff != "" {
		t.Errorf("method label values (-want +got):\n%s", diff)
	}
	body := serve(t, h, newRequest(http.MethodGet, "/metrics", "")).Body.String()
	for _, want := range []string{
		// chi answers a method it does not know 405 on any path but the gate's.
		`latchkey_http_requests_total{method="OTHER",route="unmatched",status="405"} 20002`,
		`latchkey_http_requests_total{method="OTHER",route="/v1/ratelimit/gate/{policy}",status="200"} 10001`,
		`latchkey_http_requests_total{method="OTHER",route="/v1/ratelimit/gate/{policy}",status="404"} 10001`,
		`latchkey_http_requests_total{method="OTHER",route="/v1/ratelimit/gate/{policy}/*",status="200"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestRequestID: a client's X-Request-Id is kept when it is 1-128
// characters of A-Z a-z 0-9 . _ : / -, and replaced by a generated one
// otherwise; every answer carries the request's ID in X-Request-Id, and the
// problem body and the request log carry the same one.
func TestRequestID(t *testing.T) {
	generated := regexp.MustCompile(`^[A-Za-z0-9._:-]+/[A-Za-z0-9]{10}-[0-9]{6,}$`)
	long := strings.Repeat("a", 5000)
	tests := []struct {
		desc, sent string
		kept       bool
	}{
		{"none", "", false},
		{"a UUID", "0b5d3a8e-6f0c-4c55-9d7e-0123456789ab", true},
		{"every allowed character", "Az09._:/-", true},
		{"128 characters", strings.Repeat("b", 128), true},
		{"129 characters", strings.Repeat("b", 129), false},
		{"5,000 characters", long, false},
		{"a space", "abc def", false},
		{"a quote", `abc"def`, false},
		{"a newline escape", `abc\ndef`, false},
		{"non-ASCII", "abcé", false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			var logs syncBuffer
			h := newTestRouter(t, grantingService(), handlers.Config{Logger: newJSONLogger(&logs)})
			req := newRequest(http.MethodGet, "/v1/locks/bad%20name", "") // a 400 problem
			if tt.sent != "" {
				req.Header.Set("X-Request-Id", tt.sent)
			}
			rec := serve(t, h, req)
			got := rec.Header().Get("X-Request-Id")
			switch {
			case tt.kept && got != tt.sent:
				t.Errorf("X-Request-Id = %q, want the client's %q", got, tt.sent)
			case !tt.kept && !generated.MatchString(got):
				t.Errorf("X-Request-Id = %q, want a generated ID", got)
			}
			p := wantProblem(t, rec, req, http.StatusBadRequest, "invalid-request")
			if p.RequestID != got {
				t.Errorf("problem request_id = %q, want the header's %q", p.RequestID, got)
			}
			var line struct {
				RequestID string `json:"request_id"`
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(logs.String())), &line); err != nil {
				t.Fatalf("log %q: %v", logs.String(), err)
			}
			if line.RequestID != got {
				t.Errorf("logged request_id = %q, want %q", line.RequestID, got)
			}
			if !tt.kept && tt.sent != "" && strings.Contains(logs.String(), tt.sent) {
				t.Errorf("the refused ID is in the logs: %s", logs.String())
			}
		})
	}
}

// TestEveryAnswerHasARequestID: successes, problems raised by the router
// itself and by handlers, probes and the gate all carry X-Request-Id, and
// generated IDs differ from request to request.
func TestEveryAnswerHasARequestID(t *testing.T) {
	fake := decisionFake(perIP(429), ratelimit.Decision{Allowed: true, Policy: "per-ip", Limit: 3})
	fake.AcquireFn = grantingService().AcquireFn
	fake.ReadyFn = func(context.Context) error { return nil }
	h := newTestRouter(t, fake, handlers.Config{})
	seen := map[string]string{}
	for _, req := range []*http.Request{
		newRequest(http.MethodPost, "/v1/locks/orders", `{"ttl":"10s"}`),
		newRequest(http.MethodPost, "/v1/locks/orders", `{"ttl":"10s"`),
		newRequest(http.MethodGet, "/nope", ""),
		newRequest(http.MethodPut, "/v1/locks/orders", ""),
		newRequest("PROPFIND", "/v1/ratelimit/gate/per-ip", ""),
		newRequest(http.MethodGet, "/v1/ratelimit/gate/per-ip", ""),
		newRequest(http.MethodGet, "/healthz", ""),
		newRequest(http.MethodGet, "/readyz", ""),
		newRequest(http.MethodGet, "/metrics", ""),
		newRequest(http.MethodGet, "/openapi.yaml", ""),
	} {
		what := req.Method + " " + req.URL.Path
		rec := serveUnchecked(h, req)
		id := rec.Header().Get("X-Request-Id")
		if id == "" {
			t.Errorf("%s (%d): no X-Request-Id", what, rec.Code)
			continue
		}
		if prev, ok := seen[id]; ok {
			t.Errorf("%s and %s both got request ID %q", prev, what, id)
		}
		seen[id] = what
	}
}
