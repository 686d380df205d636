package integration

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// instance is one Latchkey instance: a service with its own renewer and an
// HTTP server, on a shared Redis and key prefix.
type instance struct {
	*testEnv
	srv         *httptest.Server
	stopRenewer func()
}

// instanceConfig tunes the service of a keep-alive test instance.
func keepaliveConfig(prefix string) func(*serviceConfig, *handlers.Config) {
	return func(sc *serviceConfig, _ *handlers.Config) {
		sc.KeyPrefix = prefix
		sc.RenewPoll = 20 * time.Millisecond
	}
}

// newInstance starts a Latchkey instance for t on client (the raw client rdb
// wrapped, or rdb itself) with the given key prefix, and runs its renewer
// until t ends or kill is called.
func newInstance(t testing.TB, rdb *redis.Client, client store.Client, prefix string, opts ...envOption) *instance {
	t.Helper()
	srv, svc, _ := startServer(t, client, true, append([]envOption{keepaliveConfig(prefix)}, opts...)...)
	in := &instance{srv: srv, testEnv: &testEnv{URL: srv.URL, Client: newSpecClient(t), RDB: rdb, Prefix: prefix, Svc: svc}}
	in.stopRenewer = startRenewer(t, svc)
	return in
}

// kill stops the instance the hard way: its renewer is cancelled mid-flight
// and its server closed with every connection, nothing drained.
func (in *instance) kill() {
	in.stopRenewer()
	in.srv.CloseClientConnections()
	in.srv.Close()
}

// startRenewer runs svc's renewer until t ends or the returned function is
// called; either way it waits for the renewer to return.
func startRenewer(t testing.TB, svc interface{ RunRenewer(context.Context) }) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.RunRenewer(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// metric reads one sample of the instance's /metrics (name with its labels,
// as printed, e.g. `x_total{reason="max_hold"}`); absent counts as 0.
func (e *testEnv) metric(t testing.TB, sample string) float64 {
	t.Helper()
	r := e.do(t, "GET", "/metrics", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /metrics = %d", r.Status)
	}
	sc := bufio.NewScanner(strings.NewReader(string(r.Body)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s = %q: %v", sample, v, err)
			}
			return f
		}
	}
	return 0
}

// acquireKeepalive takes a keep-alive lease through e and returns its token.
func (e *testEnv) acquireKeepalive(t testing.TB, name, body string) string {
	t.Helper()
	r := e.do(t, "POST", "/v1/locks/"+name, body)
	if r.Status != http.StatusCreated {
		t.Fatalf("acquire %s %s = %d %s, want 201", name, body, r.Status, r.Body)
	}
	if r.JSON(t)["keepalive"] == nil {
		t.Fatalf("acquire %s %s: no keepalive in %s", name, body, r.Body)
	}
	return r.Header.Get("Lock-Token")
}

// lockState inspects name through e with token.
func (e *testEnv) lockState(t testing.TB, name, token string) map[string]any {
	t.Helper()
	r := e.do(t, "GET", "/v1/locks/"+name, "", "Lock-Token", token)
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s = %d %s", name, r.Status, r.Body)
	}
	return r.JSON(t)
}

// waitFree polls name until it is not held, failing after within.
func (e *testEnv) waitFree(t testing.TB, name string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		r := e.do(t, "GET", "/v1/locks/"+name, "")
		if r.JSON(t)["held"] == false {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s still held after %s: %s", name, within, r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// registrySize is the number of keep-alive leases registered under e's prefix.
func (e *testEnv) registrySize(t testing.TB) int64 {
	t.Helper()
	n, err := e.RDB.ZCard(t.Context(), e.Prefix+"keepalive").Result()
	if err != nil {
		t.Fatalf("ZCARD: %v", err)
	}
	return n
}

// scriptSHA is the EVALSHA digest of a script source.
func scriptSHA(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

var renewBatchSHA = scriptSHA(lua.RenewBatch)

// gatedClient holds every renew_batch call until the test opens the gate,
// after telling the test which call is waiting. Other calls pass through.
type gatedClient struct {
	*redis.Client
	entered chan []any // the ARGV of a held renew_batch call
	gate    chan struct{}
}

func (g *gatedClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha == renewBatchSHA {
		select {
		case g.entered <- args:
		default:
		}
		<-g.gate
	}
	return g.Client.EvalSha(ctx, sha, keys, args...)
}
