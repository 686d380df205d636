package integration

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service"
	"github.com/redis/go-redis/v9"
)

// holdEnv is a server whose HTTP read and write timeouts are far shorter
// than the streams it serves, and whose hold streams ping every 100ms.
func holdEnv(t *testing.T, client func(*redis.Client) service.RedisClient) *testEnv {
	t.Helper()
	rdb, url := newRedis(t)
	return newWaitEnv(t, rdb, url, waitEnvConfig{
		client: client,
		server: func(s *http.Server) {
			s.ReadTimeout = 300 * time.Millisecond
			s.WriteTimeout = 500 * time.Millisecond
		},
		router: func(c *handlers.Config) {
			c.HoldPing = 100 * time.Millisecond
			c.StreamWriteTimeout = time.Second
		},
	})
}

// TestHoldStream: a hold is acquired, renewed past its TTL (and past the
// server's read and write timeouts) with keep-alive comments in between;
// when the client disconnects, the lease is released at once and a waiter
// gets the lock.
func TestHoldStream(t *testing.T) {
	e := holdEnv(t, nil)
	h := e.openHold(t, "held", `{"ttl":"300ms"}`)
	if h.Status != http.StatusOK || !strings.HasPrefix(h.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("hold: %d %s %s, want 200 text/event-stream", h.Status, h.Header.Get("Content-Type"), h.Body)
	}
	ev := h.next(t, time.Second, false)
	token, _ := ev.Data["token"].(string)
	fence, _ := ev.Data["fence"].(float64)
	if ev.Name != "acquired" || token == "" || token != h.Header.Get("Lock-Token") || fence <= 0 {
		t.Fatalf("first event = %+v, want acquired with the Lock-Token's token and a fence", ev)
	}

	var renewed, pings int
	end := time.Now().Add(1500 * time.Millisecond) // 5 TTLs, 3 write timeouts, 5 read timeouts
	for time.Now().Before(end) {
		ev := h.next(t, time.Second, true)
		switch {
		case ev.Comment == "ping":
			pings++
		case ev.Name == "renewed":
			renewed++
			if ev.Data["fence"] != fence || ev.Data["token"] != nil {
				t.Fatalf("renewed event %+v: want the same fence %v and no token", ev.Data, fence)
			}
		default:
			t.Fatalf("unexpected event %+v while held", ev)
		}
	}
	if renewed < 8 || pings < 5 {
		t.Errorf("in 1.5s: %d renewals and %d pings, want about 15 of each (every ttl/3 and every 100ms)", renewed, pings)
	}
	if st := e.state(t, "held"); !st.Held || st.Fence != int64(fence) {
		t.Fatalf("state while held = %+v, want held with fence %v", st, fence)
	}

	got := make(chan waitResult, 1)
	go func() { got <- e.send(t.Context(), "POST", "/v1/locks/held", `{"wait":"5s"}`) }()
	e.waitForWaiters(t, "held", 1)
	start := time.Now()
	h.close()
	r := <-got
	elapsed := time.Since(start)
	if r.Status != http.StatusCreated || r.Fence <= int64(fence) {
		t.Fatalf("waiter: %d %s, want 201 with a fence above %v", r.Status, r.Body, fence)
	}
	if elapsed > time.Second {
		t.Errorf("waiter acquired %s after the hold's client went away, want within 1s", elapsed)
	}
}

// TestHoldEnds: a hold ends with "lost" when the lock is force-released,
// and with "released" when its owner releases it through the API.
func TestHoldEnds(t *testing.T) {
	e := holdEnv(t, nil)
	tests := []struct {
		desc   string
		end    func(token string) waitResult
		status int
		event  string
		reason string
	}{
		{"force-release", func(string) waitResult {
			return e.send(t.Context(), "DELETE", "/v1/locks/ends?force=true", "", "Authorization", "Bearer "+testAdminKey)
		}, http.StatusNoContent, "lost", "force_released"},
		{"release by the owner", func(token string) waitResult {
			return e.send(t.Context(), "DELETE", "/v1/locks/ends", "", "Lock-Token", token)
		}, http.StatusOK, "released", ""},
	}
	for _, tt := range tests {
		h := e.openHold(t, "ends", `{"ttl":"10s"}`)
		if ev := h.next(t, time.Second, false); ev.Name != "acquired" {
			t.Fatalf("%s: first event %+v, want acquired", tt.desc, ev)
		}
		if r := tt.end(h.Header.Get("Lock-Token")); r.Status != tt.status {
			t.Fatalf("%s: %d %s, want %d", tt.desc, r.Status, r.Body, tt.status)
		}
		ev := h.next(t, time.Second, false)
		if ev.Name != tt.event || (tt.reason != "" && ev.Data["reason"] != tt.reason) {
			t.Errorf("%s: event %+v, want %s %s at once (not at the next renewal)", tt.desc, ev, tt.event, tt.reason)
		}
		if !h.ended(time.Second) {
			t.Errorf("%s: the stream did not end after %s", tt.desc, tt.event)
		}
	}
}

// TestHoldWaitFails: a hold that cannot get the lock within its wait is an
// ordinary 409 lock-held answer, not a stream.
func TestHoldWaitFails(t *testing.T) {
	e := holdEnv(t, nil)
	e.mustAcquire(t, "taken", `{"ttl":"10s"}`)
	h := e.openHold(t, "taken", `{"wait":"200ms"}`)
	if h.Status != http.StatusConflict || !strings.Contains(h.Body, `"lock-held"`) || h.Header.Get("Retry-After") == "" {
		t.Errorf("hold of a held lock: %d %s, want 409 lock-held with Retry-After", h.Status, h.Body)
	}
}

// outageClient fails every script call with a connection error while down
// is set, as a Redis outage would.
type outageClient struct {
	*redis.Client
	down *atomic.Bool
}

func (o outageClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if o.down.Load() {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"))
		return cmd
	}
	return o.Client.EvalSha(ctx, sha, keys, args...)
}

// TestHoldLostInOutage: when the store cannot be reached for longer than
// the lease's TTL, the hold reports "lost" (expired) and ends.
func TestHoldLostInOutage(t *testing.T) {
	var down atomic.Bool
	e := holdEnv(t, func(c *redis.Client) service.RedisClient { return outageClient{Client: c, down: &down} })
	h := e.openHold(t, "outage", `{"ttl":"300ms"}`)
	if ev := h.next(t, time.Second, false); ev.Name != "acquired" {
		t.Fatalf("first event %+v, want acquired", ev)
	}
	down.Store(true)
	start := time.Now()
	for {
		ev := h.next(t, 2*time.Second, false)
		if ev.Name == "renewed" {
			continue
		}
		if ev.Name != "lost" || ev.Data["reason"] != "expired" {
			t.Fatalf("event %+v, want lost (expired)", ev)
		}
		break
	}
	if elapsed := time.Since(start); elapsed < 200*time.Millisecond || elapsed > time.Second {
		t.Errorf("lost %s after the outage began, want about the lease's 300ms TTL", elapsed)
	}
}

// TestHoldForceReleaseUnheard: when the force-release's wake-up never
// reaches the hold (every message is lost), the next renewal still finds
// the lease gone and reports why: force_released, as the store recorded.
func TestHoldForceReleaseUnheard(t *testing.T) {
	deaf := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = deaf.Close() })
	e := holdEnv(t, func(c *redis.Client) service.RedisClient { return deafSubscriber{Client: c, deaf: deaf} })
	h := e.openHold(t, "unheard", `{"ttl":"600ms"}`)
	if ev := h.next(t, time.Second, false); ev.Name != "acquired" {
		t.Fatalf("first event %+v, want acquired", ev)
	}
	r := e.send(t.Context(), "DELETE", "/v1/locks/unheard?force=true", "", "Authorization", "Bearer "+testAdminKey)
	if r.Status != http.StatusNoContent {
		t.Fatalf("force-release: %d %s", r.Status, r.Body)
	}
	for {
		ev := h.next(t, time.Second, false) // the next renewal is at most ttl/3 away
		if ev.Name == "renewed" {
			continue
		}
		if ev.Name != "lost" || ev.Data["reason"] != "force_released" {
			t.Fatalf("event %+v, want lost (force_released)", ev)
		}
		break
	}
}

// TestHoldWithCurl: `curl -N` shows the stream as it happens; when the curl
// process is killed (SIGKILL), the lease is released at once.
func TestHoldWithCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed")
	}
	e := holdEnv(t, nil)
	cmd := exec.Command(curl, "-sS", "-N", "-X", "POST", "-H", "Content-Type: application/json",
		"-d", `{"ttl":"600ms"}`, e.URL+"/v1/locks/curl/hold")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	var seen []string
	for lines.Scan() && len(seen) < 3 {
		if l := lines.Text(); strings.HasPrefix(l, "event: ") {
			seen = append(seen, strings.TrimPrefix(l, "event: "))
		}
	}
	if !slices.Equal(seen, []string{"acquired", "renewed", "renewed"}) {
		t.Fatalf("curl -N printed events %v, want acquired, renewed, renewed as they happen", seen)
	}
	if !e.state(t, "curl").Held {
		t.Fatal("lock not held while curl streams the hold")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	start := time.Now()
	eventually(t, time.Second, "the lease is released once curl is killed", func() bool { return !e.state(t, "curl").Held })
	t.Logf("lease released %s after curl was killed", time.Since(start))
}
