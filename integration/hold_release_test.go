package integration

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestHoldEndsWithAWaiter: a hold whose lock has a waiter ends with
// "released" when its owner releases it through the API, even when the
// waiter takes the lock before the hold looks again; a force-release still
// ends it with "lost" (force_released).
func TestHoldEndsWithAWaiter(t *testing.T) {
	e := newTestEnv(t, withShortStreams())
	tests := []struct {
		desc   string
		lock   string
		end    func(name, token string) response
		status int
		event  string
		reason string
	}{
		{"release by the owner", "handover", func(name, token string) response {
			return e.send(t.Context(), "DELETE", "/v1/locks/"+name, "", "Lock-Token", token)
		}, http.StatusOK, "released", ""},
		{"force-release", "evicted", func(name, _ string) response {
			return e.send(t.Context(), "DELETE", "/v1/locks/"+name+"?force=true", "", "Authorization", "Bearer "+testAdminKey)
		}, http.StatusNoContent, "lost", "force_released"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			// The waiter wins the race with the hold's renewal most of the
			// time, not always: try it several times.
			for i := range 10 {
				name := fmt.Sprintf("%s-%d", tt.lock, i)
				h := e.openHold(t, name, `{"ttl":"10s"}`)
				if ev := h.next(t, time.Second, false); ev.Name != "acquired" {
					t.Fatalf("first event %+v, want acquired", ev)
				}
				got := make(chan response, 1)
				go func() { got <- e.send(t.Context(), "POST", "/v1/locks/"+name, `{"wait":"10s"}`) }()
				e.waitForWaiters(t, name, 1)
				if r := tt.end(name, h.Header.Get("Lock-Token")); r.Status != tt.status {
					t.Fatalf("%d: %d %s, want %d", i, r.Status, r.Body, tt.status)
				}
				ev := h.next(t, 5*time.Second, false)
				if ev.Name != tt.event || ev.Data["reason"] != nilIfEmpty(tt.reason) {
					t.Errorf("%d: event %+v, want %s %s", i, ev, tt.event, tt.reason)
				}
				if !h.ended(5 * time.Second) {
					t.Errorf("%d: the stream did not end after %s", i, ev.Name)
				}
				w := <-got
				if w.Status != http.StatusCreated {
					t.Fatalf("%d: waiter: %d %s, want 201", i, w.Status, w.Body)
				}
				e.release(t, name, w.Token())
			}
		})
	}
}

// nilIfEmpty is what a decoded JSON member holds for s: absent when empty.
func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
