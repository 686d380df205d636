package main

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRunWaitsForReplicas runs the server with -redis-min-replicas 1 over a
// real primary and replica (local redis-server processes on 127.0.0.1): a
// grant is on the replica by the time the client has it; with the replica
// gone, a grant and a release are 503 store-unavailable saying how many
// replicas had the change, and the metric counts them.
func TestRunWaitsForReplicas(t *testing.T) {
	bin := redisServerBinary(t)
	primary, _ := startRedisProcess(t, bin)
	replica, killReplica := startRedisProcess(t, bin, "--replicaof", "127.0.0.1", strconv.Itoa(primary))
	waitFor(t, "the replica to be in sync", func() bool { return replicaInSync(t, primary, replica) })
	rc := redis.NewClient(&redis.Options{Addr: addrOf(replica)})
	t.Cleanup(func() { _ = rc.Close() })

	s := startServer(t, "-redis-url", "redis://"+addrOf(primary)+"/0",
		"-redis-min-replicas", "1", "-redis-replica-timeout", "300ms")
	resp, lease := s.call(t, http.MethodPost, "/v1/locks/replicated", `{"ttl":"5m"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire with the replica up = %d %v, want 201", resp.StatusCode, lease)
	}
	// WAIT answered only once the replica acknowledged the grant: it has
	// the lock's keys now, without polling.
	if n, err := rc.Exists(t.Context(), "latchkey:lock:{replicated}").Result(); err != nil || n != 1 {
		t.Errorf("the replica does not have the granted lock: EXISTS = %d, %v", n, err)
	}
	token, _ := lease["token"].(string)

	killReplica()
	for _, req := range []struct {
		what, method, path, body string
		headers                  []string
	}{
		{"acquire", http.MethodPost, "/v1/locks/unreplicated", `{"ttl":"5m"}`, nil},
		{"release", http.MethodDelete, "/v1/locks/replicated", "", []string{"Lock-Token", token}},
	} {
		resp, problem := s.call(t, req.method, req.path, req.body, req.headers...)
		detail, _ := problem["detail"].(string)
		if resp.StatusCode != http.StatusServiceUnavailable || problem["type"] != "store-unavailable" ||
			!strings.Contains(detail, "reached 0 of the 1 replicas required") {
			t.Errorf("%s with the replica gone = %d %v, want 503 store-unavailable saying 0 of 1 replicas had it",
				req.what, resp.StatusCode, problem)
		}
	}
	if got := metricValue(t, s, `latchkey_redis_errors_total{kind="replicas",op="acquire"}`); got != "1" {
		t.Errorf("replica shortfalls counted for acquire = %q, want 1", got)
	}
}

// metricValue reads one sample of the server's /metrics, "" when absent.
func metricValue(t *testing.T, s *testServer, series string) string {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}
