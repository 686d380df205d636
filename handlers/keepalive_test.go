package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

func TestAcquireKeepalivePassesBoundsAndAnswersThem(t *testing.T) {
	until := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	var got locks.AcquireRequest
	fake := grantingService()
	fake.AcquireFn = func(_ context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
		got = req
		return locks.Lease{Name: name, Token: tokenA, Fence: 1, HoldCount: 1, TTL: 30 * time.Second, ExpiresAt: expires,
			Keepalive: &locks.Keepalive{Until: until, Heartbeat: 10 * time.Second, HeartbeatDue: expires}}, nil
	}
	rec := serve(t, newTestRouter(t, fake, handlers.Config{}),
		newRequest("POST", "/v1/locks/orders", `{"ttl":"30s","keepalive":true,"max_hold":"1h","heartbeat":"10s"}`, "Lock-Token", tokenA))
	if rec.Code != http.StatusCreated {
		t.Fatalf("status = %d, want 201 (body %s)", rec.Code, rec.Body)
	}
	want := locks.AcquireRequest{Token: tokenA, TTL: 30 * time.Second, Keepalive: true, MaxHold: time.Hour, Heartbeat: 10 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AcquireRequest (-want +got):\n%s", diff)
	}
	var body struct {
		Keepalive map[string]any `json:"keepalive"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	wantKA := map[string]any{"max_hold_until": "2026-11-23T06:00:00Z", "heartbeat_ms": float64(10000), "heartbeat_due": "2026-11-23T05:00:30Z"}
	if diff := cmp.Diff(wantKA, body.Keepalive); diff != "" {
		t.Errorf("keepalive (-want +got):\n%s", diff)
	}
}

func TestGetLockReportsLostReason(t *testing.T) {
	fake := grantingService()
	fake.InspectFn = func(_ context.Context, name, _ string) (locks.LockState, error) {
		return locks.LockState{Name: name, Fence: 3, LostReason: locks.LostHeartbeatMissed}, nil
	}
	rec := serve(t, newTestRouter(t, fake, handlers.Config{}), newRequest("GET", "/v1/locks/orders", "", "Lock-Token", tokenA))
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"name": "orders", "held": false, "hold_count": float64(0), "ttl_ms": float64(0), "fence": float64(3),
		"owned": false, "lost_reason": "heartbeat_missed", "waiters": float64(0), "fair": false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GET body (-want +got):\n%s", diff)
	}
}

// TestKeepaliveSettingsThatCannotWork: a keep-alive TTL the renewer cannot
// renew in time, or a max_hold shorter than the TTL (given or defaulted), is
// a 400 naming the bound, and nothing is written to the store.
func TestKeepaliveSettingsThatCannotWork(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(rdb, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lk, err := locks.New(st, locks.Config{MaxTTL: 24 * time.Hour}) // a ttl may pass the default max_hold
	if err != nil {
		t.Fatal(err)
	}
	rl, err := ratelimit.New(st, ratelimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := handlers.NewRouter(lk, rl, handlers.Config{})
	tests := []struct {
		body, field, detail string
	}{
		{`{"ttl":"1ms","keepalive":true}`, "ttl", "ttl of a keep-alive lease must be at least 1s, so the service can renew it (every ttl/3) before it expires; got 1ms"},
		{`{"ttl":"999ms","keepalive":true,"max_hold":"1m"}`, "ttl", "must be at least 1s"},
		{`{"ttl":"10s","keepalive":true,"max_hold":"1s"}`, "max_hold", "max_hold must be at least the ttl (10s), got 1s"},
		{`{"keepalive":true,"max_hold":"10s"}`, "max_hold", "max_hold must be at least the ttl (30s), got 10s"},
		{`{"ttl":"2h","keepalive":true}`, "max_hold", "the server's default max_hold is 1h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			req := newRequest("POST", "/v1/locks/orders", tt.body)
			p := wantProblem(t, serve(t, h, req), req, http.StatusBadRequest, "invalid-request")
			wantField(t, p, tt.field)
			if p.Detail != tt.detail && !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("detail = %q, want it to contain %q", p.Detail, tt.detail)
			}
			if keys := m.Keys(); len(keys) != 0 {
				t.Errorf("a refused acquire left keys %v", keys)
			}
		})
	}
	// The bounds themselves are accepted.
	for _, body := range []string{`{"ttl":"1s","keepalive":true}`, `{"ttl":"1s","keepalive":true,"max_hold":"1s"}`} {
		req := newRequest("POST", "/v1/locks/bounds-"+strconv.Itoa(len(body)), body)
		if rec := serve(t, h, req); rec.Code != http.StatusCreated {
			t.Errorf("%s: status %d, want 201: %s", body, rec.Code, rec.Body)
		}
	}
}
