package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
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
