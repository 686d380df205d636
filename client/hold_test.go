package client_test

import (
	"context"
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

// TestHoldGrantedAfterAWaitLongerThanItsTTL: a hold that waited longer than
// its TTL before the server announced it is valid from the acquired event
// (which the server sends with at least two thirds of the TTL left), not
// ended at once for a validity counted from the request's send time.
func TestHoldGrantedAfterAWaitLongerThanItsTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
	announced := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/locks/job/hold" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"name":"job","fence":7,"released":true,"hold_count":0}`)
			return
		}
		time.Sleep(2 * ttl) // the wait, as the server waits for the lock
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		announced <- time.Now()
		fmt.Fprintf(w, "event: acquired\ndata: %s\n\n", `{"name":"job","token":"t","fence":7,"hold_count":1,"ttl_ms":300,"reentrant":false}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Hold(t.Context(), "job", client.HoldOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	at := <-announced
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Unlock(ctx)
	}()
	if vu := h.ValidUntil(); vu.Before(at.Add(ttl - ttl/3)) {
		t.Errorf("ValidUntil = the announcement %+v, want at least the announcement + %s", vu.Sub(at), ttl-ttl/3)
	}
}
