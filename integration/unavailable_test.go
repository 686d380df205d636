package integration

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/locks"
)

// outageTimeout is the Redis timeout of servers facing an outage. A request
// taking more than hangFactor times it counts as hanging: that bound only
// detects hangs, it is no performance claim.
const (
	outageTimeout = 400 * time.Millisecond
	hangFactor    = 5
)

// wantUnavailable sends one request and checks that it is answered 503
// store-unavailable with Retry-After, without internals, and did not hang.
func wantUnavailable(t *testing.T, e *testEnv, method, path, body string, headerPairs ...string) {
	t.Helper()
	start := time.Now()
	r := e.do(t, method, path, body, headerPairs...)
	took := time.Since(start)
	p := wantProblem(t, r, http.StatusServiceUnavailable, "store-unavailable")
	if took > hangFactor*outageTimeout {
		t.Errorf("%s %s took %s with a Redis timeout of %s: it hangs", method, path, took, outageTimeout)
	}
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After = %q, want whole seconds >= 1", r.Header.Get("Retry-After"))
	}
	if !outageDetails[p.Detail] {
		t.Errorf("detail = %q, want one of %q", p.Detail, slices.Sorted(maps.Keys(outageDetails)))
	}
	for _, leak := range []string{"goroutine", "dial tcp", "i/o timeout", "127.0.0.1", "redis"} {
		if strings.Contains(string(r.Body), leak) {
			t.Errorf("503 body reveals internals (%q): %s", leak, r.Body)
		}
	}
}

// outageDetails are the details a 503 may give for a Redis that is out: a
// closed port may refuse the connection at once or leave the client in its
// dial backoff until the timeout, whichever a loaded machine meets first; a
// silent Redis accepts connections and never refuses.
var outageDetails = map[string]bool{
	"the store did not answer in time; try again": true,
	"the store refused the connection; try again": true,
}

// checkOutage runs every lock operation and readiness against a server
// whose Redis is out.
func checkOutage(t *testing.T, e *testEnv) {
	tok := locks.NewToken()
	wantUnavailable(t, e, "POST", "/v1/locks/outage", `{"ttl":"5s"}`)
	wantUnavailable(t, e, "POST", "/v1/locks/outage", "", "Lock-Token", tok)
	wantUnavailable(t, e, "GET", "/v1/locks/outage", "")
	wantUnavailable(t, e, "POST", "/v1/locks/outage/renew", `{"ttl":"5s"}`, "Lock-Token", tok)
	wantUnavailable(t, e, "DELETE", "/v1/locks/outage", "", "Lock-Token", tok)
	wantUnavailable(t, e, "DELETE", "/v1/locks/outage?force=true", "", "Authorization", "Bearer "+testAdminKey)

	start := time.Now()
	r := e.do(t, "GET", "/readyz", "")
	wantStatus(t, r, http.StatusServiceUnavailable)
	if got := r.JSON(t)["status"]; got != "unavailable" {
		t.Errorf("readyz status = %v, want unavailable", got)
	}
	if took := time.Since(start); took > hangFactor*outageTimeout {
		t.Errorf("/readyz took %s with a Redis timeout of %s: it hangs", took, outageTimeout)
	}
	// Liveness does not depend on Redis.
	wantStatus(t, e.do(t, "GET", "/healthz", ""), http.StatusOK)
}

func TestRedisDown(t *testing.T) {
	for _, c := range serverClients {
		t.Run(c.name, func(t *testing.T) {
			checkOutage(t, newTestEnv(t, unreachable(closedPort(t)), withServerClient(outageTimeout), withClient(c.wrap)))
		})
	}
}

func TestRedisSilent(t *testing.T) {
	for _, c := range serverClients {
		t.Run(c.name, func(t *testing.T) {
			checkOutage(t, newTestEnv(t, unreachable(storetest.SilentRedis(t)), withServerClient(outageTimeout), withClient(c.wrap)))
		})
	}
}

// A real Redis that stops answering for a while (CLIENT PAUSE): requests
// get 503 in time, and the service recovers by itself when Redis does. The
// server pipelines its scripts, as cmd/server does by default.
func TestRedisPaused(t *testing.T) {
	_, url := startRedisContainer(t)
	e := newTestEnv(t, withRedis(url), withServerClient(outageTimeout), withClient(serverClients[1].wrap))
	held := e.acquire(t, "paused", `{"ttl":"30s"}`)

	pause := 3 * time.Second
	if err := e.RDB.Do(t.Context(), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	paused := time.Now()
	wantUnavailable(t, e, "POST", "/v1/locks/paused", "", "Lock-Token", held.Token)
	wantUnavailable(t, e, "DELETE", "/v1/locks/paused", "", "Lock-Token", held.Token)
	if time.Since(paused) >= pause {
		t.Fatal("the pause ended before the requests were answered; the test proves nothing")
	}

	// Once Redis answers again, so does Latchkey; the lease is as it was.
	deadline := time.Now().Add(pause + 5*time.Second)
	for {
		r := e.do(t, "GET", "/v1/locks/paused", "", "Lock-Token", held.Token)
		if r.Status == http.StatusOK {
			st := decodeAs[stateJSON](t, r)
			if !st.Held || st.Owned == nil || !*st.Owned || st.Fence != held.Fence {
				t.Errorf("after the pause: %+v, want held and owned with fence %d", st, held.Fence)
			}
			break
		}
		wantProblem(t, r, http.StatusServiceUnavailable, "store-unavailable")
		if time.Now().After(deadline) {
			t.Fatal("Latchkey did not recover after Redis did")
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/paused", "", "Lock-Token", held.Token), http.StatusOK)
}
