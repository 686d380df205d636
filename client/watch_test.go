package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/client"
)

// nextWatchEvent is the next event of events; not within a minute fails.
func nextWatchEvent(t *testing.T, events <-chan client.Event) client.Event {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(time.Minute):
		t.Fatal("no watch event within a minute")
	}
	return client.Event{}
}

// TestWatchReconnectsWithTheLastEventID: when the stream ends the watch
// connects again, sending the id of the last event it read, and goes on
// with the events of the new stream.
func TestWatchReconnectsWithTheLastEventID(t *testing.T) {
	var connects atomic.Int32
	lastIDs := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/semaphores/pool/events" {
			http.Error(w, "unexpected", http.StatusNotFound)
			return
		}
		lastIDs <- r.Header.Get("Last-Event-ID")
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		event := func(id, name, data string) {
			fmt.Fprintf(w, ": ping\n\nid: %s\nevent: %s\ndata: %s\n\n", id, name, data)
			w.(http.Flusher).Flush()
		}
		if connects.Add(1) == 1 {
			event("1-0-a", "state", `{"name":"pool","permits":4}`)
			event("2-1-b", "acquired", `{"name":"pool","fence":2,"owner":"w","count":3,"ttl_ms":30000}`)
			return // the stream breaks
		}
		event("2-0-c", "released", `{"name":"pool","fence":2,"count":3,"ttl_ms":1000}`)
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, client.WithRetry(client.Retry{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	events := c.Watch(ctx, client.KindSemaphore, "pool")
	var got []client.Event
	for range 3 {
		got = append(got, nextWatchEvent(t, events))
	}
	want := []client.Event{
		{Type: client.EventState, ID: "1-0-a", Name: "pool", State: []byte(`{"name":"pool","permits":4}`)},
		{Type: client.EventAcquired, ID: "2-1-b", Name: "pool", Fence: 2, Owner: "w", Count: 3, TTL: 30 * time.Second},
		{Type: client.EventReleased, ID: "2-0-c", Name: "pool", Fence: 2, Count: 3, TTL: time.Second},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events mismatch (-want +got):\n%s", diff)
	}
	if first, second := <-lastIDs, <-lastIDs; first != "" || second != "2-1-b" {
		t.Errorf("Last-Event-ID = %q then %q, want none then 2-1-b", first, second)
	}
	cancel()
	for range events { // closed once ctx ends
	}
}

// TestWatchEndsOnARefusal: a refused watch (here a 429, too many streams
// of this client) ends with one event carrying the problem.
func TestWatchEndsOnARefusal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"type":"watch-streams-per-client","title":"Too many watch streams for this client","status":429}`)
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	events := c.Watch(t.Context(), client.KindLock, "job")
	ev := nextWatchEvent(t, events)
	var p *client.Problem
	if !errors.As(ev.Err, &p) || p.Type != "watch-streams-per-client" {
		t.Fatalf("event = %+v, want an error with the watch-streams-per-client problem", ev)
	}
	if _, ok := <-events; ok {
		t.Error("the watch went on after a refusal")
	}
}
