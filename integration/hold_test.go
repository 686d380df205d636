package integration

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// withShortStreams makes a server whose HTTP read and write timeouts are far
// shorter than the streams it serves, and whose hold streams ping every 100ms.
// Its idle connections stay open for two minutes, as the server's do: with
// no IdleTimeout the read timeout would close them after 300ms, and a
// request sent on one just as it closes gets EOF (a DELETE is not retried).
func withShortStreams() envOption {
	return func(c *envConfig) {
		c.server = func(s *http.Server) {
			s.ReadTimeout = 300 * time.Millisecond
			s.WriteTimeout = 500 * time.Millisecond
			s.IdleTimeout = 2 * time.Minute
		}
		c.router.HoldPing = 100 * time.Millisecond
		c.router.StreamWriteTimeout = time.Second
	}
}

// eventGuard bounds the wait for a hold event that is due: it fails only a
// stream that hangs.
const eventGuard = 10 * time.Second

// TestHoldStream: a hold is acquired, renewed past its TTL (and past the
// server's read and write timeouts) with keep-alive comments in between;
// when the client disconnects, the lease is released (not left to expire)
// and a waiter gets the lock.
func TestHoldStream(t *testing.T) {
	e := newTestEnv(t, withShortStreams())
	const ttl = 600 * time.Millisecond
	h := e.openHold(t, "held", `{"ttl":"`+ttl.String()+`"}`)
	if h.Status != http.StatusOK || !strings.HasPrefix(h.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("hold: %d %s %s, want 200 text/event-stream", h.Status, h.Header.Get("Content-Type"), h.Body)
	}
	ev := h.next(t, eventGuard, false)
	token, _ := ev.Data["token"].(string)
	fence, _ := ev.Data["fence"].(float64)
	if ev.Name != "acquired" || token == "" || token != h.Header.Get("Lock-Token") || fence <= 0 {
		t.Fatalf("first event = %+v, want acquired with the Lock-Token's token and a fence", ev)
	}

	// Read the stream for 3 TTLs (3.6 write timeouts, 6 read timeouts) and
	// until it has shown several renewals (every ttl/3) and pings (every
	// 100ms).
	var renewed, pings int
	start, guard := time.Now(), time.Now().Add(time.Minute)
	for time.Since(start) < 3*ttl || renewed < 6 || pings < 6 {
		if time.Now().After(guard) {
			t.Fatalf("after %s: %d renewals and %d pings, want 6 of each", time.Since(start), renewed, pings)
		}
		ev := h.next(t, eventGuard, true)
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
	if st := e.inspect(t, "held"); !st.Held || st.Fence != int64(fence) {
		t.Fatalf("state while held = %+v, want held with fence %v", st, fence)
	}

	got := make(chan response, 1)
	go func() { got <- e.send(t.Context(), "POST", "/v1/locks/held", `{"wait":"30s"}`) }()
	e.waitForWaiters(t, "held", 1)
	h.close()
	r := <-got
	if r.Status != http.StatusCreated || r.Fence() <= int64(fence) {
		t.Fatalf("waiter: %d %s, want 201 with a fence above %v", r.Status, r.Body, fence)
	}
	// The TTL would have let the waiter in too: the release is what counts.
	eventually(t, eventGuard, "the hold's lease is released when its client goes away", func() bool {
		return metricValue(t, e, `latchkey_lock_releases_total{kind="final"}`) == 1
	})
}

// TestHoldEnds: a hold ends with "lost" when the lock is force-released,
// and with "released" when its owner releases it through the API, at once:
// its next renewal is 20s away.
func TestHoldEnds(t *testing.T) {
	e := newTestEnv(t, withShortStreams())
	tests := []struct {
		desc   string
		end    func(token string) response
		status int
		event  string
		reason string
	}{
		{"force-release", func(string) response {
			return e.send(t.Context(), "DELETE", "/v1/locks/ends?force=true", "", "Authorization", "Bearer "+testAdminKey)
		}, http.StatusNoContent, "lost", "force_released"},
		{"release by the owner", func(token string) response {
			return e.send(t.Context(), "DELETE", "/v1/locks/ends", "", "Lock-Token", token)
		}, http.StatusOK, "released", ""},
	}
	for _, tt := range tests {
		h := e.openHold(t, "ends", `{"ttl":"60s"}`)
		if ev := h.next(t, eventGuard, false); ev.Name != "acquired" {
			t.Fatalf("%s: first event %+v, want acquired", tt.desc, ev)
		}
		if r := tt.end(h.Header.Get("Lock-Token")); r.Status != tt.status {
			t.Fatalf("%s: %d %s, want %d", tt.desc, r.Status, r.Body, tt.status)
		}
		ev := h.next(t, eventGuard, false)
		if ev.Name != tt.event || (tt.reason != "" && ev.Data["reason"] != tt.reason) {
			t.Errorf("%s: event %+v, want %s %s at once (not at the next renewal)", tt.desc, ev, tt.event, tt.reason)
		}
		if !h.ended(eventGuard) {
			t.Errorf("%s: the stream did not end after %s", tt.desc, tt.event)
		}
	}
}

// TestHoldWaitFails: a hold that cannot get the lock within its wait is an
// ordinary 409 lock-held answer, not a stream.
func TestHoldWaitFails(t *testing.T) {
	e := newTestEnv(t, withShortStreams())
	e.acquire(t, "taken", `{"ttl":"10s"}`)
	h := e.openHold(t, "taken", `{"wait":"200ms"}`)
	if h.Status != http.StatusConflict || !strings.Contains(h.Body, `"lock-held"`) || h.Header.Get("Retry-After") == "" {
		t.Errorf("hold of a held lock: %d %s, want 409 lock-held with Retry-After", h.Status, h.Body)
	}
}

// outageClient fails every script call with a connection error while down
// is set, as a Redis outage would.
type outageClient struct {
	store.Client
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
// the lease's TTL, the hold reports "lost" (expired) and ends; not before
// the TTL since its last renewal has run out, although its renewals fail
// every ttl/3.
func TestHoldLostInOutage(t *testing.T) {
	var down atomic.Bool
	e := newTestEnv(t, withShortStreams(), withClientOf(func(c redis.UniversalClient) store.Client { return outageClient{Client: c, down: &down} }))
	const ttl = 3 * time.Second
	h := e.openHold(t, "outage", `{"ttl":"`+ttl.String()+`"}`)
	ev := h.next(t, eventGuard, false)
	if ev.Name != "acquired" {
		t.Fatalf("first event %+v, want acquired", ev)
	}
	expires := eventExpiry(t, ev)
	down.Store(true)
	for {
		ev := h.next(t, ttl+eventGuard, false)
		if ev.Name == "renewed" { // sent before the outage began
			expires = eventExpiry(t, ev)
			continue
		}
		if ev.Name != "lost" || ev.Data["reason"] != "expired" {
			t.Fatalf("event %+v, want lost (expired)", ev)
		}
		break
	}
	// The hold counts the TTL from when it sent its last good renewal,
	// which is before the store stamped expires_at by the renewal's round
	// trip: ttl/3 leaves room for a slow one, and is still far from the
	// first failed renewal, two thirds of a TTL before the lease runs out.
	if early := time.Until(expires); early > ttl/3 {
		t.Errorf("lost %s before the lease's last expires_at %s, want about then", early, expires.Format(time.RFC3339Nano))
	}
}

// eventExpiry is the expires_at of an acquired or renewed hold event.
func eventExpiry(t testing.TB, ev sseEvent) time.Time {
	t.Helper()
	s, _ := ev.Data["expires_at"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s event: expires_at %q: %v", ev.Name, s, err)
	}
	return at
}

// TestHoldForceReleaseUnheard: when the force-release's wake-up never
// reaches the hold (every message is lost), the next renewal still finds
// the lease gone and reports why: force_released, as the store recorded.
func TestHoldForceReleaseUnheard(t *testing.T) {
	deaf := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = deaf.Close() })
	e := newTestEnv(t, withShortStreams(), withClientOf(func(c redis.UniversalClient) store.Client { return deafSubscriber{Client: c, deaf: deaf} }))
	h := e.openHold(t, "unheard", `{"ttl":"1500ms"}`)
	if ev := h.next(t, eventGuard, false); ev.Name != "acquired" {
		t.Fatalf("first event %+v, want acquired", ev)
	}
	r := e.send(t.Context(), "DELETE", "/v1/locks/unheard?force=true", "", "Authorization", "Bearer "+testAdminKey)
	if r.Status != http.StatusNoContent {
		t.Fatalf("force-release: %d %s", r.Status, r.Body)
	}
	for {
		ev := h.next(t, eventGuard, false) // the next renewal is at most ttl/3 away
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
// process is killed (SIGKILL), the lease is released, not left to expire.
func TestHoldWithCurl(t *testing.T) {
	e := newTestEnv(t, withShortStreams())
	cmd, lines := curlHold(t, e.URL+"/v1/locks/curl/hold", `{"ttl":"1500ms"}`)
	var seen []string
	for lines.Scan() && len(seen) < 3 {
		if l := lines.Text(); strings.HasPrefix(l, "event: ") {
			seen = append(seen, strings.TrimPrefix(l, "event: "))
		}
	}
	if !slices.Equal(seen, []string{"acquired", "renewed", "renewed"}) {
		t.Fatalf("curl -N printed events %v, want acquired, renewed, renewed as they happen", seen)
	}
	if !e.inspect(t, "curl").Held {
		t.Fatal("lock not held while curl streams the hold")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	start := time.Now()
	// The 1.5s TTL would free the lock too: the release is what counts.
	eventually(t, eventGuard, "the lease is released once curl is killed", func() bool {
		return metricValue(t, e, `latchkey_lock_releases_total{kind="final"}`) == 1
	})
	t.Logf("lease released %s after curl was killed", time.Since(start))
	if e.inspect(t, "curl").Held {
		t.Error("lock still held after its hold was released")
	}
}
