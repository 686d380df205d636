package integration

import (
	"encoding/json"
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

// TestReadHoldEndsReleasedWhenItsReaderLeaves: the last reader's release
// publishes "drained", not "released", and wakes only waiting writers; a
// read lease's hold ends with "released" all the same, even when the
// waiting writer takes the lock before the hold looks again.
func TestReadHoldEndsReleasedWhenItsReaderLeaves(t *testing.T) {
	e := newTestEnv(t, withShortStreams())
	for i := range 5 {
		name := fmt.Sprintf("read-hold-%d", i)
		h := e.openHoldAt(t, "/v1/rwlocks/"+name+"/hold", `{"mode":"read","ttl":"10s"}`)
		if ev := h.next(t, time.Second, false); ev.Name != "acquired" || ev.Data["mode"] != "read" {
			t.Fatalf("first event %+v, want acquired read", ev)
		}
		got := make(chan response, 1)
		go func() { got <- e.send(t.Context(), "POST", "/v1/rwlocks/"+name, `{"mode":"write","wait":"10s"}`) }()
		eventually(t, 5*time.Second, name+" has a waiting writer", func() bool {
			var st struct {
				Waiters struct {
					Write int64 `json:"write"`
				} `json:"waiters"`
			}
			r := e.do(t, "GET", "/v1/rwlocks/"+name, "")
			wantStatus(t, r, http.StatusOK)
			return json.Unmarshal(r.Body, &st) == nil && st.Waiters.Write == 1
		})
		if r := e.send(t.Context(), "DELETE", "/v1/rwlocks/"+name, "", "Lock-Token", h.Header.Get("Lock-Token")); r.Status != http.StatusOK {
			t.Fatalf("%d: release: %d %s", i, r.Status, r.Body)
		}
		if ev := h.next(t, 5*time.Second, false); ev.Name != "released" {
			t.Errorf("%d: event %+v, want released", i, ev)
		}
		if !h.ended(5 * time.Second) {
			t.Errorf("%d: the stream did not end after its release", i)
		}
		w := <-got
		if w.Status != http.StatusCreated {
			t.Fatalf("%d: writer: %d %s, want 201", i, w.Status, w.Body)
		}
		if r := e.send(t.Context(), "DELETE", "/v1/rwlocks/"+name, "", "Lock-Token", w.Token()); r.Status != http.StatusOK {
			t.Fatalf("%d: writer's release: %d %s", i, r.Status, r.Body)
		}
	}
}
