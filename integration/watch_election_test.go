package integration

import (
	"net/http"
	"testing"
	"time"
)

// openElectionWatch opens the watch stream of the election name, each
// event's data checked against the spec.
func (e *testEnv) openElectionWatch(t *testing.T, name string) *holdStream {
	t.Helper()
	schemas := map[string]string{"state": "ElectionState"}
	for _, ev := range []string{"elected", "proclaimed", "vacant"} {
		schemas[ev] = "WatchElectionEvent"
	}
	w := e.openStream(t, "GET", "/v1/elections/"+name+"/events", "", schemas)
	if w.Status != http.StatusOK {
		t.Fatalf("watch %s: status %d body %s", name, w.Status, w.Body)
	}
	return w
}

// TestWatchElectionSeesEachLeader: a watcher of an election over HTTP sees
// its state, then each leader elected with its term and value, a value
// proclaimed in the same term, and vacant on resignation (no reason), on
// removal (force_released) and on expiry (expired); the terms increase.
func TestWatchElectionSeesEachLeader(t *testing.T) {
	e := newTestEnv(t, withWatchResync(time.Hour))
	w := e.openElectionWatch(t, "watched")
	if st := wantWatchEvent(t, w, "state", 0); st.Data["leader"] != nil || st.Data["name"] != "watched" {
		t.Fatalf("first state = %v, want the vacant election watched", st.Data)
	}
	campaign := func(body string) response {
		t.Helper()
		r := e.do(t, "POST", "/v1/elections/watched", body)
		wantStatus(t, r, http.StatusCreated)
		return r
	}

	a := campaign(`{"value":"10.0.0.7:5432","owner":"db-1","ttl":"30s"}`)
	if ev := wantWatchEvent(t, w, "elected", a.Fence()); ev.Data["value"] != "10.0.0.7:5432" || ev.Data["owner"] != "db-1" ||
		ev.Data["term"] != float64(a.Fence()) {
		t.Errorf("elected data = %v, want db-1's leadership with its term and value", ev.Data)
	}
	wantStatus(t, e.do(t, "PUT", "/v1/elections/watched/value", `{"value":"10.0.0.9:5432"}`, "Lock-Token", a.Token()), http.StatusOK)
	if ev := wantWatchEvent(t, w, "proclaimed", a.Fence()); ev.Data["value"] != "10.0.0.9:5432" {
		t.Errorf("proclaimed data = %v, want the new value", ev.Data)
	}
	wantStatus(t, e.do(t, "DELETE", "/v1/elections/watched", "", "Lock-Token", a.Token()), http.StatusOK)
	if ev := wantWatchEvent(t, w, "vacant", a.Fence()); ev.Data["reason"] != nil {
		t.Errorf("vacant on resignation: %v, want no reason", ev.Data)
	}

	b := campaign(`{"value":"b","ttl":"30s"}`)
	wantWatchEvent(t, w, "elected", b.Fence())
	wantStatus(t, e.do(t, "DELETE", "/v1/elections/watched?force=true", "", "Authorization", "Bearer "+testAdminKey), http.StatusNoContent)
	if ev := wantWatchEvent(t, w, "vacant", b.Fence()); ev.Data["reason"] != "force_released" {
		t.Errorf("vacant on removal: %v, want reason force_released", ev.Data)
	}

	c := campaign(`{"value":"c","ttl":"300ms"}`)
	wantWatchEvent(t, w, "elected", c.Fence())
	if ev := wantWatchEvent(t, w, "vacant", c.Fence()); ev.Data["reason"] != "expired" {
		t.Errorf("vacant on expiry: %v, want reason expired", ev.Data)
	}
	if !(a.Fence() < b.Fence() && b.Fence() < c.Fence()) {
		t.Errorf("terms %d, %d, %d, want increasing", a.Fence(), b.Fence(), c.Fence())
	}
	if n := metricValue(t, e, `latchkey_watch_events_total{event="vacant",kind="election"}`); n != 3 {
		t.Errorf("latchkey_watch_events_total of vacant = %v, want 3", n)
	}
}
