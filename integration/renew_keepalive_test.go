package integration

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRenewShorterTTLOfKeepaliveLease: renewing a keep-alive lease with a
// shorter ttl makes the service renew it on the new ttl's schedule, so it
// outlives that ttl many times over; the renewal answers the lease's
// keep-alive bounds, as the acquire did.
func TestRenewShorterTTLOfKeepaliveLease(t *testing.T) {
	in := newTestEnv(t, withRenewer(instancePoll))
	acq := in.do(t, "POST", "/v1/locks/shortened", `{"ttl":"6s","keepalive":true,"max_hold":"1m"}`)
	wantStatus(t, acq, http.StatusCreated)
	token := acq.Header.Get("Lock-Token")

	r := in.do(t, "POST", "/v1/locks/shortened/renew", `{"ttl":"600ms"}`, "Lock-Token", token)
	wantStatus(t, r, http.StatusOK)
	renewed := r.JSON(t)
	if renewed["ttl_ms"] != 600.0 {
		t.Errorf("renewed ttl_ms = %v, want 600", renewed["ttl_ms"])
	}
	if diff := cmp.Diff(acq.JSON(t)["keepalive"], renewed["keepalive"]); renewed["keepalive"] == nil || diff != "" {
		t.Errorf("renew answered keepalive %v, want the acquire's %v", renewed["keepalive"], acq.JSON(t)["keepalive"])
	}

	// On the acquire's schedule (every 2s) the lease would end 600ms after
	// the renew; on the new one it is renewed every 200ms.
	end := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(end) {
		st := in.inspectAs(t, "shortened", token)
		if !st.ownedIs(true) {
			t.Fatalf("lease lost after a renew with a shorter ttl: %v", st)
		}
		if ttl := st.TTLMS; ttl > 600 {
			t.Fatalf("lease ttl_ms = %v after a renew with ttl 600ms, want at most 600", ttl)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHoldSurvivesRenewWithShorterTTL: when the holder of a hold stream
// renews its lease through the API with a shorter ttl, the stream renews the
// lease on the new ttl's schedule instead of losing it.
func TestHoldSurvivesRenewWithShorterTTL(t *testing.T) {
	e := newTestEnv(t, withShortStreams())
	h := e.openHold(t, "hold-shortened", `{"ttl":"6s"}`)
	if ev := h.next(t, time.Second, false); ev.Name != "acquired" {
		t.Fatalf("first event %+v, want acquired", ev)
	}
	token := h.Header.Get("Lock-Token")
	r := e.do(t, "POST", "/v1/locks/hold-shortened/renew", `{"ttl":"600ms"}`, "Lock-Token", token)
	wantStatus(t, r, http.StatusOK)

	// The stream renewed every 2s before; the lease now ends 600ms after
	// each renewal.
	end := time.Now().Add(2500 * time.Millisecond)
	renewed := 0
	for time.Now().Before(end) {
		ev := h.next(t, 2*time.Second, false)
		if ev.Name != "renewed" {
			t.Fatalf("event %+v after a renew with a shorter ttl, want renewed", ev)
		}
		if ev.Data["ttl_ms"] != 600.0 {
			t.Errorf("renewed event ttl_ms = %v, want 600", ev.Data["ttl_ms"])
		}
		renewed++
	}
	if st := e.inspectAs(t, "hold-shortened", token); !st.ownedIs(true) {
		t.Fatalf("lease after %d renewals: %v, want owned", renewed, st)
	}
}
