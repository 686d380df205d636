package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRunShutdownEndsHoldsAndWaits: a shutdown does not wait for hold
// streams and waiting acquires: the hold releases its lease and ends with a
// "released" event, the waiter gets a 503, and run returns well within the
// shutdown timeout.
func TestRunShutdownEndsHoldsAndWaits(t *testing.T) {
	const shutdownTimeout = time.Minute
	s := startServer(t, "-shutdown-timeout", shutdownTimeout.String())

	req, err := http.NewRequestWithContext(t.Context(), "POST", s.base+"/v1/locks/nightly/hold", strings.NewReader(`{"ttl":"30s"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	stream := bufio.NewReader(resp.Body)
	if line, _ := stream.ReadString('\n'); line != "event: acquired\n" {
		t.Fatalf("first line of the hold stream = %q, want the acquired event", line)
	}

	waited := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(context.WithoutCancel(t.Context()), "POST", s.base+"/v1/locks/nightly",
			strings.NewReader(`{"wait":"50s"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			waited <- 0
			return
		}
		_ = resp.Body.Close()
		waited <- resp.StatusCode
	}()
	pollUntil(t, 30*time.Second, "the lock has 1 waiter", func() bool {
		_, st := s.call(t, http.MethodGet, "/v1/locks/nightly", "")
		return st["waiters"] == 1.0
	})

	// Had the shutdown waited for the hold or the waiter, run would return
	// at the shutdown timeout at the earliest (or the waiter after its 50s):
	// half of it is the hang guard.
	s.cancel()
	guard := time.After(shutdownTimeout / 2)
	streamed := make(chan []byte, 1)
	go func() { rest, _ := io.ReadAll(stream); streamed <- rest }()
	select {
	case rest := <-streamed:
		if !strings.Contains(string(rest), "event: released\n") {
			t.Errorf("hold stream after shutdown began: %q, want a released event", rest)
		}
	case <-guard:
		t.Fatalf("the hold stream did not end %s after shutdown began (its timeout is %s)", shutdownTimeout/2, shutdownTimeout)
	}
	select {
	case status := <-waited:
		if status != http.StatusServiceUnavailable && status != http.StatusCreated {
			// 201: the hold's release reached the waiter before its wait ended.
			t.Errorf("waiting acquire during shutdown = %d, want 503 (or 201)", status)
		}
	case <-guard:
		t.Fatalf("the waiter got no answer %s after shutdown began (its timeout is %s)", shutdownTimeout/2, shutdownTimeout)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("run = %v, want nil", err)
		}
		s.done <- err
	case <-guard:
		t.Fatalf("run did not return %s after shutdown began (its timeout is %s)", shutdownTimeout/2, shutdownTimeout)
	}
}
