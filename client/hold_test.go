package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/latchkey/latchkey/client"
)

// TestHoldRenewedValidity: a "renewed" event moves ValidUntil to its arrival
// plus the TTL less one renewal interval (TTL/3), never to arrival + TTL:
// the server does not say when it renewed, and the event may have been
// delayed on its way.
func TestHoldRenewedValidity(t *testing.T) {
	const renewedTTL = 60 * time.Second // above the grant's, so the event moves ValidUntil
	beforeRenewed := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/locks/job/hold" {
			http.Error(w, "unexpected", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		event := func(name, data string) {
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
			w.(http.Flusher).Flush()
		}
		event("acquired", `{"name":"job","token":"t","fence":7,"hold_count":1,"ttl_ms":3000,"reentrant":false}`)
		beforeRenewed <- time.Now()
		event("renewed", fmt.Sprintf(`{"name":"job","fence":7,"hold_count":1,"ttl_ms":%d,"reentrant":false}`, renewedTTL.Milliseconds()))
		event("released", `{"name":"job","fence":7,"released":true,"hold_count":0}`)
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Hold(t.Context(), "job", client.HoldOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done(): // after the renewed event was taken in: events are read in order
	case <-time.After(10 * time.Second):
		t.Fatal("the hold never ended")
	}
	afterRenewed := time.Now()
	if err := h.Err(); !errors.Is(err, client.ErrReleased) {
		t.Fatalf("Err = %v, want ErrReleased", err)
	}
	sent := <-beforeRenewed
	want := renewedTTL - renewedTTL/3
	// The event arrived between sent and afterRenewed.
	if vu := h.ValidUntil(); vu.Before(sent.Add(want)) || vu.After(afterRenewed.Add(want)) {
		t.Fatalf("ValidUntil = arrival + %s (at most), want arrival + %s (TTL - TTL/3)",
			vu.Sub(sent), want)
	}
}
