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
	s := startServer(t, "-shutdown-timeout", "20s")

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
	time.Sleep(200 * time.Millisecond) // the waiter is waiting

	start := time.Now()
	s.cancel()
	rest, _ := io.ReadAll(stream)
	if !strings.Contains(string(rest), "event: released\n") {
		t.Errorf("hold stream after shutdown began: %q, want a released event", rest)
	}
	if status := <-waited; status != http.StatusServiceUnavailable && status != http.StatusCreated {
		// 201: the hold's release reached the waiter before its wait ended.
		t.Errorf("waiting acquire during shutdown = %d, want 503 (or 201)", status)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("run = %v, want nil", err)
		}
		s.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return 10s after shutdown began (its timeout is 20s)")
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("shutdown took %s with a hold and a waiter, want them ended at once", elapsed)
	}
}
