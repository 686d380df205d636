package integration

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisRestartRecovery stops the Redis container under a running server
// and starts it again: while Redis is down every request is a fast 503
// store-unavailable; once it is back the next calls succeed, the scripts
// Redis forgot being loaded again after NOSCRIPT.
func TestRedisRestartRecovery(t *testing.T) {
	// The server's own client settings (cmd/server openStore), with 1s bounds.
	const opTimeout = time.Second
	rr := newRestartableRedis(t, opTimeout)
	e := newTestEnv(t, withRedisClient(rr.Client, rr.URL), withServiceConfig(func(c *serviceConfig) { c.OpTimeout = opTimeout }))

	r := e.do(t, "POST", "/v1/locks/before-restart", `{"ttl":"1m"}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("acquire before the restart: status = %d, want 201; body %s", r.Status, r.Body)
	}
	token := r.Header.Get("Lock-Token")
	reloadsBefore := scriptReloads(t, e)

	rr.Stop(t)

	t.Run("outage is a fast 503", func(t *testing.T) {
		for _, req := range []struct{ method, path, body, token string }{
			{"POST", "/v1/locks/during-outage", `{"ttl":"10s"}`, ""},
			{"GET", "/v1/locks/before-restart", "", ""},
			{"POST", "/v1/locks/before-restart/renew", `{"ttl":"1m"}`, token},
			{"DELETE", "/v1/locks/before-restart", "", token},
		} {
			// The request's own deadline turns a hang into a failure here.
			start := time.Now()
			var hdr []string
			if req.token != "" {
				hdr = []string{"Lock-Token", req.token}
			}
			r := e.doWithin(t, 4*opTimeout, req.method, req.path, req.body, hdr...)
			if r.Status != http.StatusServiceUnavailable {
				t.Fatalf("%s %s while Redis is down: status = %d, want 503; body %s", req.method, req.path, r.Status, r.Body)
			}
			if got := r.JSON(t)["type"]; got != "store-unavailable" {
				t.Errorf("%s %s while Redis is down: type = %v, want store-unavailable", req.method, req.path, got)
			}
			t.Logf("%s %s: 503 after %s", req.method, req.path, time.Since(start).Round(time.Millisecond))
		}
		r := e.doWithin(t, 4*opTimeout, "GET", "/readyz", "")
		if r.Status != http.StatusServiceUnavailable {
			t.Errorf("readyz while Redis is down: status = %d, want 503; body %s", r.Status, r.Body)
		}
	})

	rr.Start(t)

	t.Run("recovers after restart", func(t *testing.T) {
		// The very first call after the restart must succeed: no /readyz
		// first, which would load the scripts and hide the NOSCRIPT path.
		r := e.doWithin(t, 4*opTimeout, "POST", "/v1/locks/after-restart", `{"ttl":"10s"}`)
		if r.Status != http.StatusCreated {
			t.Fatalf("first acquire after the restart: status = %d, want 201; body %s", r.Status, r.Body)
		}
		if got := scriptReloads(t, e); got <= reloadsBefore {
			t.Errorf("latchkey_script_reloads_total = %v after the restart, want more than %v (NOSCRIPT reload)", got, reloadsBefore)
		}
		r = e.doWithin(t, 4*opTimeout, "DELETE", "/v1/locks/after-restart", "", "Lock-Token", r.Header.Get("Lock-Token"))
		if r.Status != http.StatusOK {
			t.Errorf("release after the restart: status = %d, want 200; body %s", r.Status, r.Body)
		}
		r = e.doWithin(t, 4*opTimeout, "GET", "/readyz", "")
		if r.Status != http.StatusOK {
			t.Errorf("readyz after the restart: status = %d, want 200; body %s", r.Status, r.Body)
		}
	})
}

// doWithin is e.do with a deadline: a request that hangs past d fails t.
func (e *testEnv) doWithin(t *testing.T, d time.Duration, method, path, body string, headerPairs ...string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	r := e.send(ctx, method, path, body, headerPairs...)
	if r.Err != nil {
		t.Fatalf("%s %s: no answer within %s: %v", method, path, d, r.Err)
	}
	return r
}

// scriptReloads reads latchkey_script_reloads_total from the server's /metrics.
func scriptReloads(t *testing.T, e *testEnv) float64 {
	t.Helper()
	r := e.do(t, "GET", "/metrics", "")
	if r.Status != http.StatusOK {
		t.Fatalf("metrics: status = %d, want 200", r.Status)
	}
	sc := bufio.NewScanner(bytes.NewReader(r.Body))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == "latchkey_script_reloads_total" {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("metrics: %q: %v", sc.Text(), err)
			}
			return v
		}
	}
	t.Fatalf("metrics: no latchkey_script_reloads_total in %s", r.Body)
	return 0
}

// waitForPing waits until the Redis at addr answers PING.
func waitForPing(t *testing.T, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis at %s did not answer PING within 30s after restart: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
