package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// testAdminKey is the admin credential of every test server.
const testAdminKey = "test-admin-key-0123456789"

// testEnv is one Latchkey server over HTTP on a real Redis, with its own
// key prefix so tests sharing a Redis never see each other's keys.
type testEnv struct {
	URL      string       // base URL of the server
	Client   *http.Client // checks every response against api/openapi.yaml
	RDB      *redis.Client
	RedisURL string
	Prefix   string
	Svc      *services
}

// envOption adjusts the service or router config of a test server.
type envOption func(*serviceConfig, *handlers.Config)

// newTestEnv starts a server for t on a real Redis (see newRedis). Its
// service and router configs can be adjusted with opts.
func newTestEnv(t testing.TB, opts ...envOption) *testEnv {
	t.Helper()
	rdb, url := newRedis(t)
	return newTestEnvOn(t, rdb, url, opts...)
}

// newTestEnvOn starts a server for t on the given Redis.
func newTestEnvOn(t testing.TB, rdb *redis.Client, url string, opts ...envOption) *testEnv {
	t.Helper()
	srv, svc, scfg := startServer(t, rdb, true, opts...)
	return &testEnv{URL: srv.URL, Client: newSpecClient(t), RDB: rdb, RedisURL: url, Prefix: scfg.KeyPrefix, Svc: svc}
}

// startServer serves, for t, a service on client with the harness's
// defaults (a unique key prefix, a private metrics registry, the test admin
// key) adjusted by opts. With load, the scripts are loaded first, as at a
// normal start-up; without, the server starts as cmd/server does when Redis
// cannot be reached. It returns the server, the service and its config.
func startServer(t testing.TB, client store.Client, load bool, opts ...envOption) (*httptest.Server, *services, serviceConfig) {
	t.Helper()
	reg := prometheus.NewRegistry()
	scfg := serviceConfig{storeConfig: storeConfig{KeyPrefix: uniquePrefix(), Registerer: reg}, RateLimit: ratelimit.DefaultConfig()}
	hcfg := handlers.Config{Logger: slog.New(slog.DiscardHandler), Registry: reg, AdminKey: testAdminKey, Store: "redis"}
	for _, o := range opts {
		o(&scfg, &hcfg)
	}
	svc := newServices(t, client, scfg)
	if load {
		if err := svc.LoadScripts(t.Context()); err != nil {
			t.Fatalf("load scripts: %v", err)
		}
	}
	srv := httptest.NewServer(handlers.NewRouter(svc.lockService, svc.limitService, hcfg))
	t.Cleanup(srv.Close)
	return srv, svc, scfg
}

func uniquePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "lktest:" + hex.EncodeToString(b[:]) + ":"
}

// response is a finished HTTP exchange.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map.
func (r response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.Body, err)
	}
	return m
}

// newRequest builds a request to the server; a non-empty body is sent as
// application/json unless headers set another Content-Type. Header pairs are
// name, value, name, value...
func (e *testEnv) newRequest(t testing.TB, ctx context.Context, method, path, body string, headerPairs ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, e.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headerPairs); i += 2 {
		req.Header.Set(headerPairs[i], headerPairs[i+1])
	}
	return req
}

// do sends one request; a non-empty body is sent as application/json unless
// headers set another Content-Type. Header pairs are name, value, name, value...
func (e *testEnv) do(t testing.TB, method, path, body string, headerPairs ...string) response {
	t.Helper()
	resp, err := e.Client.Do(e.newRequest(t, t.Context(), method, path, body, headerPairs...))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// keys lists the Redis keys of this test's server.
func (e *testEnv) keys(t testing.TB) []string {
	t.Helper()
	ks, err := e.RDB.Keys(t.Context(), e.Prefix+"*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	return ks
}

func TestHarnessValidatesAgainstSpec(t *testing.T) {
	e := newTestEnv(t)
	r := e.do(t, "POST", "/v1/locks/harness", `{"ttl":"5s"}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("status = %d, want 201; body %s", r.Status, r.Body)
	}
	if tok := r.Header.Get("Lock-Token"); len(tok) != 22 {
		t.Errorf("Lock-Token = %q, want 22 characters", tok)
	}
	r = e.do(t, "GET", "/readyz", "")
	if r.Status != http.StatusOK || r.JSON(t)["store"] != "redis" {
		t.Errorf("readyz = %d %s", r.Status, r.Body)
	}
}

// The operational routes answer through the spec-checking client: each is
// documented with the status and content type it serves.
func TestOperationalRoutesAreDocumented(t *testing.T) {
	e := newTestEnv(t)
	for _, c := range []struct{ path, contentType string }{
		{"/healthz", "application/json"},
		{"/readyz", "application/json"},
		{"/openapi.yaml", "application/yaml"},
		{"/metrics", "text/plain"},
		{"/docs/index.html", "text/html"},
	} {
		r := e.do(t, "GET", c.path, "")
		if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), c.contentType) {
			t.Errorf("GET %s = %d %q, want 200 %s", c.path, r.Status, r.Header.Get("Content-Type"), c.contentType)
		}
	}
}
