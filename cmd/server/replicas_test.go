package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
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

	// A generous replica timeout: a loaded machine must not make the live
	// replica look absent.
	s := startServer(t, "-redis-url", "redis://"+addrOf(primary)+"/0", "-redis-timeout", "10s",
		"-redis-min-replicas", "1", "-redis-replica-timeout", "3s")
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

	// A Redis that forgot its scripts (a restart, a failover) has them
	// loaded again on the replicated path too.
	pc := redis.NewClient(&redis.Options{Addr: addrOf(primary)})
	t.Cleanup(func() { _ = pc.Close() })
	if err := pc.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
	if resp, body := s.call(t, http.MethodPost, "/v1/locks/after-flush", `{"ttl":"5m"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire after SCRIPT FLUSH = %d %v, want 201", resp.StatusCode, body)
	}
	if got := metricValue(t, s, "latchkey_script_reloads_total"); got != "1" {
		t.Errorf("scripts reloaded after SCRIPT FLUSH = %q, want 1", got)
	}

	killReplica()
	// Answers that changed nothing are given as they are: WAIT counts the
	// connection's earlier writes too, so it must not turn them into 503s.
	for _, req := range []struct {
		what, method, path, body string
		status                   int
		typ                      string
		headers                  []string
	}{
		{"a second owner's acquire", http.MethodPost, "/v1/locks/replicated", `{"ttl":"5m"}`, http.StatusConflict, "lock-held", nil},
		{"another token's release", http.MethodDelete, "/v1/locks/replicated", "", http.StatusConflict, "not-owner",
			[]string{"Lock-Token", "someone-elses-token-0123456789"}},
		{"a release of no lease", http.MethodDelete, "/v1/locks/never-held", "", http.StatusNotFound, "lease-not-found",
			[]string{"Lock-Token", "someone-elses-token-0123456789"}},
	} {
		resp, problem := s.call(t, req.method, req.path, req.body, req.headers...)
		if resp.StatusCode != req.status || problem["type"] != req.typ {
			t.Errorf("%s with the replica gone = %d %v, want %d %s", req.what, resp.StatusCode, problem, req.status, req.typ)
		}
	}
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

// TestRunWhenRedisRefusesWait: a grant that WAIT cannot confirm (here an
// ACL user without WAIT) is a 503, not a script error, and the lease the
// client never received is given back.
func TestRunWhenRedisRefusesWait(t *testing.T) {
	bin := redisServerBinary(t)
	primary, _ := startRedisProcess(t, bin)
	admin := redis.NewClient(&redis.Options{Addr: addrOf(primary)})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "nowait", "on", ">nowait-secret", "~*", "&*", "+@all", "-wait").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	s := startServer(t, "-redis-url", "redis://nowait:nowait-secret@"+addrOf(primary)+"/0",
		"-redis-min-replicas", "1", "-redis-replica-timeout", "300ms")
	resp, problem := s.call(t, http.MethodPost, "/v1/locks/unconfirmed", `{"ttl":"5m"}`)
	if resp.StatusCode != http.StatusServiceUnavailable || problem["type"] != "store-unavailable" {
		t.Fatalf("acquire when WAIT is refused = %d %v, want 503 store-unavailable", resp.StatusCode, problem)
	}
	if n, err := admin.Exists(t.Context(), "latchkey:fence:{unconfirmed}").Result(); err != nil || n != 1 {
		t.Fatalf("no fence counter (%d, %v): the acquire never ran, the test proves nothing", n, err)
	}
	waitFor(t, "the unconfirmed lease to be given back", func() bool {
		n, err := admin.Exists(t.Context(), "latchkey:lock:{unconfirmed}").Result()
		return err == nil && n == 0
	})
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

// TestReadinessCountsReplicas: with -redis-min-replicas 1 on a primary that
// has no replica, every lock change would be a 503, so the server says so
// at start-up and is not ready, naming the replicas connected against those
// required; once a replica is in sync it is ready, and not ready again once
// the replica is gone.
func TestReadinessCountsReplicas(t *testing.T) {
	bin := redisServerBinary(t)
	primary, _ := startRedisProcess(t, bin)
	s := startServer(t, "-redis-url", "redis://"+addrOf(primary)+"/0", "-redis-timeout", "10s",
		"-redis-min-replicas", "1", "-redis-replica-timeout", "3s")
	warn, _ := s.logs.find("fewer redis replicas connected than -redis-min-replicas requires: not ready, and every lock change gets 503 until enough are")
	if warn == nil || warn["level"] != "WARN" || warn["connected"] != 0.0 || warn["required"] != 1.0 {
		t.Errorf("start-up warning = %v, want one saying 0 connected, 1 required; logs:\n%s", warn, s.logs)
	}
	notReady := func() (bool, map[string]any) {
		resp, body := s.call(t, http.MethodGet, "/readyz", "")
		return resp.StatusCode == http.StatusServiceUnavailable, body
	}
	if ok, body := notReady(); !ok || body["status"] != "unavailable" ||
		!strings.Contains(fmt.Sprint(body["detail"]), "0 replicas connected, 1 required (-redis-min-replicas)") {
		t.Errorf("/readyz with no replica = %v, want 503 naming 0 connected, 1 required", body)
	} else if diff := cmp.Diff(map[string]any{"connected": 0.0, "required": 1.0}, body["replicas"]); diff != "" {
		t.Errorf("/readyz replicas (-want +got):\n%s", diff)
	}

	replica, killReplica := startRedisProcess(t, bin, "--replicaof", "127.0.0.1", strconv.Itoa(primary))
	waitFor(t, "the replica to be in sync", func() bool { return replicaInSync(t, primary, replica) })
	waitFor(t, "/readyz to be 200 with the replica in sync", func() bool {
		resp, _ := s.call(t, http.MethodGet, "/readyz", "")
		return resp.StatusCode == http.StatusOK
	})
	if resp, body := s.call(t, http.MethodPost, "/v1/locks/replicated", `{"ttl":"5m"}`); resp.StatusCode != http.StatusCreated {
		t.Errorf("acquire once ready = %d %v, want 201", resp.StatusCode, body)
	}

	killReplica()
	waitFor(t, "/readyz to be 503 with the replica gone", func() bool { ok, _ := notReady(); return ok })
	if _, body := notReady(); !strings.Contains(fmt.Sprint(body["detail"]), "0 replicas connected, 1 required") {
		t.Errorf("/readyz with the replica gone = %v, want it to name 0 connected, 1 required", body)
	}
}
