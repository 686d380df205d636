package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// logSink collects the server's JSON log lines and tells when one with a
// given message has been written.
type logSink struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines []map[string]any
	added chan struct{} // closed and replaced on every new line
}

func newLogSink() *logSink { return &logSink{added: make(chan struct{})} }

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	for _, line := range bytes.Split(bytes.TrimSpace(p), []byte("\n")) {
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil {
			s.lines = append(s.lines, rec)
		}
	}
	close(s.added)
	s.added = make(chan struct{})
	return len(p), nil
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// find returns the first line with msg, if any, and a channel closed on the
// next write.
func (s *logSink) find(msg string) (map[string]any, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if l["msg"] == msg {
			return l, nil
		}
	}
	return nil, s.added
}

// waitFor waits for a log line with msg, or for run to return.
func (s *logSink) waitFor(t *testing.T, msg string, runErr <-chan error) map[string]any {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		line, more := s.find(msg)
		if line != nil {
			return line
		}
		select {
		case <-more:
		case err := <-runErr:
			t.Fatalf("run returned %v before logging %q; logs:\n%s", err, msg, s)
		case <-timeout:
			t.Fatalf("no %q log line after 30s; logs:\n%s", msg, s)
		}
	}
}

// testServer is run() serving on a loopback port.
type testServer struct {
	base   string // http://host:port
	addr   string
	logs   *logSink
	cancel context.CancelFunc
	done   chan error // receives run's result
}

// startServer calls run with args (plus -addr 127.0.0.1:0) and no
// environment, and waits until it listens. The server stops when t ends.
func startServer(t *testing.T, args ...string) *testServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{logs: newLogSink(), cancel: cancel, done: make(chan error, 1)}
	go func() {
		s.done <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), env(), s.logs)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Errorf("run did not return 30s after its context ended")
		}
	})
	line := s.logs.waitFor(t, "listening", s.done)
	s.addr, _ = line["addr"].(string)
	if s.addr == "" {
		t.Fatalf("listening line without addr: %v", line)
	}
	s.base = "http://" + s.addr
	return s
}

// pollUntil polls cond every 10ms until it holds, and fails t if it does not
// within d: d is a hang guard, not a measure.
func pollUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("after %s: not yet %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// call sends one request and decodes a JSON answer into a map.
func (s *testServer) call(t *testing.T, method, path, body string, headers ...string) (*http.Response, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	var m map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s %s: body %q: %v", method, path, raw, err)
		}
	}
	return resp, m
}

func TestRunServesLocksOnTheEmbeddedStore(t *testing.T) {
	s := startServer(t)
	if !strings.Contains(s.logs.String(), `"level":"WARN","msg":"no LATCHKEY_REDIS_URL: running on the embedded in-memory store`) {
		t.Errorf("no warning about the embedded store; logs:\n%s", s.logs)
	}

	resp, ready := s.call(t, http.MethodGet, "/readyz", "")
	if resp.StatusCode != http.StatusOK || ready["store"] != "embedded" || ready["status"] != "ready" {
		t.Errorf("/readyz = %d %v, want 200 ready on the embedded store", resp.StatusCode, ready)
	}

	resp, lease := s.call(t, http.MethodPost, "/v1/locks/demo", `{"ttl":"30s"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire = %d %v, want 201", resp.StatusCode, lease)
	}
	token := resp.Header.Get("Lock-Token")
	if token == "" || lease["token"] != token {
		t.Fatalf("acquire: Lock-Token header %q, body token %v", token, lease["token"])
	}

	resp, state := s.call(t, http.MethodGet, "/v1/locks/demo", "", "Lock-Token", token)
	if resp.StatusCode != http.StatusOK || state["held"] != true || state["owned"] != true || state["fence"] != lease["fence"] {
		t.Errorf("inspect = %d %v, want held and owned with fence %v", resp.StatusCode, state, lease["fence"])
	}

	resp, other := s.call(t, http.MethodPost, "/v1/locks/demo", "")
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second acquire = %d %v (Retry-After %q), want 409 with Retry-After", resp.StatusCode, other, resp.Header.Get("Retry-After"))
	}

	resp, rel := s.call(t, http.MethodDelete, "/v1/locks/demo", "", "Lock-Token", token)
	if resp.StatusCode != http.StatusOK || rel["released"] != true {
		t.Errorf("release = %d %v, want 200 released", resp.StatusCode, rel)
	}
	if strings.Contains(s.logs.String(), token) {
		t.Error("the server logged a lease token")
	}
}

func TestRunEmbeddedStoreTTLsTickInRealTime(t *testing.T) {
	s := startServer(t)
	resp, lease := s.call(t, http.MethodPost, "/v1/locks/short", `{"ttl":"300ms"}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire = %d %v, want 201", resp.StatusCode, lease)
	}
	// Nothing else touches the lock: only the passing of real time can free it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(100 * time.Millisecond)
		_, state := s.call(t, http.MethodGet, "/v1/locks/short", "")
		if state["held"] == false {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a 300ms lease is still held after 10s: %v", state)
		}
	}
	if resp, _ := s.call(t, http.MethodPost, "/v1/locks/short", ""); resp.StatusCode != http.StatusCreated {
		t.Errorf("acquire after expiry = %d, want 201", resp.StatusCode)
	}
}

// TestRunDrainsInFlightRequests starts a request, asks the server to stop
// while the request's body is still on its way, then sends the body: the
// request must complete normally and run must return nil.
func TestRunDrainsInFlightRequests(t *testing.T) {
	s := startServer(t)
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))

	body := `{"ttl":"30s"}`
	// Expect: 100-continue makes the server tell us when the handler starts
	// reading the body, so we know the request is in flight.
	fmt.Fprintf(conn, "POST /v1/locks/drain HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n", s.addr, len(body))
	br := bufio.NewReader(conn)
	interim, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("waiting for 100 Continue: %v", err)
	}
	if interim.StatusCode != http.StatusContinue {
		t.Fatalf("interim status = %d, want 100", interim.StatusCode)
	}

	s.cancel()
	s.logs.waitFor(t, "shutting down", s.done)
	// The listener closes when shutdown starts; wait for that, so the body
	// below certainly arrives during the shutdown.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err != nil {
			break
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the server still accepts connections 10s after shutdown began")
		}
		time.Sleep(10 * time.Millisecond)
	}

	if _, err := io.WriteString(conn, body); err != nil {
		t.Fatalf("send body: %v", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("in-flight request lost during shutdown: %v", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Lock-Token") == "" {
		t.Errorf("in-flight acquire during shutdown = %d %q (Lock-Token %q), want 201 with a token",
			resp.StatusCode, raw, resp.Header.Get("Lock-Token"))
	}

	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("run = %v, want nil after a graceful shutdown", err)
		}
		s.done <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after draining")
	}
	if _, more := s.logs.find("stopped"); more != nil {
		t.Errorf("no \"stopped\" log line; logs:\n%s", s.logs)
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	// Bounded, so that a run which serves instead of refusing fails the test.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := run(ctx, []string{"-addr", "0.0.0.0:0"}, env(), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("run on 0.0.0.0 without Redis or -dev = %v, want the loopback refusal", err)
	}
}

func TestRunFailsWhenTheAddressIsTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err = run(ctx, []string{"-addr", ln.Addr().String()}, env(), io.Discard)
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("run on a taken address = %v, want a listen error", err)
	}
}

// TestRunWithRedisDown: a server whose Redis is not reachable still starts,
// says it is not ready, and answers lock requests with 503 store-unavailable.
func TestRunWithRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downURL := "redis://" + ln.Addr().String()
	_ = ln.Close() // nothing listens there any more

	// A refusal comes at once: the timeout only bounds a loaded machine.
	s := startServer(t, "-redis-url", downURL, "-redis-timeout", "2s")
	if !strings.Contains(s.logs.String(), "redis is not reachable yet: it refused the connection") {
		t.Errorf("no warning that Redis refused the connection; logs:\n%s", s.logs)
	}
	resp, ready := s.call(t, http.MethodGet, "/readyz", "")
	if resp.StatusCode != http.StatusServiceUnavailable || ready["store"] != "redis" || ready["status"] != "unavailable" {
		t.Errorf("/readyz = %d %v, want 503 unavailable on redis", resp.StatusCode, ready)
	}
	resp, problem := s.call(t, http.MethodPost, "/v1/locks/demo", "")
	if resp.StatusCode != http.StatusServiceUnavailable || problem["type"] != "store-unavailable" {
		t.Errorf("acquire = %d %v, want 503 store-unavailable", resp.StatusCode, problem)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if want := "the store refused the connection; try again"; problem["detail"] != want {
		t.Errorf("acquire detail = %q, want %q; logs:\n%s", problem["detail"], want, s.logs)
	}
}

func TestRunHelpExitsCleanly(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-h"}, env(), &out); err != nil {
		t.Fatalf("run(-h) = %v, want nil (exit 0)", err)
	}
	for _, want := range []string{"Usage: latchkey-server [flags]", "-redis-url", "LATCHKEY_REDIS_URL", "-version"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunVersion(t *testing.T) {
	var out bytes.Buffer
	// A bad environment does not keep -version from answering.
	if err := run(t.Context(), []string{"-version"}, env("LATCHKEY_REDIS_TIMEOUT", "soon"), &out); err != nil {
		t.Fatalf("run(-version) = %v, want nil", err)
	}
	if got := out.String(); !strings.HasPrefix(got, "latchkey ") || !strings.Contains(got, "go1.") || strings.Count(got, "\n") != 1 {
		t.Errorf("-version printed %q, want one line \"latchkey VERSION ... goX.Y\"", got)
	}
	old := version
	version = "v9.8.7"
	t.Cleanup(func() { version = old })
	out.Reset()
	if err := run(t.Context(), []string{"-version"}, env(), &out); err != nil || !strings.HasPrefix(out.String(), "latchkey v9.8.7 ") {
		t.Errorf("-version with main.version set = %q, %v; want it first", out.String(), err)
	}
}

// TestRunBadFlagPrintsOnlyTheError: the error is all that is said, so it is
// the last thing on the screen, not buried above the usage.
func TestRunBadFlagPrintsOnlyTheError(t *testing.T) {
	for _, args := range [][]string{{"-redis-timeout", "soon"}, {"-no-such-flag"}} {
		var out bytes.Buffer
		err := run(t.Context(), args, env(), &out)
		if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(args[0], "-")) || !strings.Contains(err.Error(), "latchkey-server -h") || !errors.Is(err, errUsage) {
			t.Errorf("run(%q) = %v, want an error naming %s and pointing to -h", args, err, args[0])
		}
		if out.Len() != 0 {
			t.Errorf("run(%q) wrote %d bytes before its error, want none:\n%s", args, out.Len(), out.String())
		}
	}
}

// TestServerBinaryNameAndExitStatus: the built server calls itself
// latchkey-server (latchkey is the command line client) and exits as the
// client does: 0 after -h, 2 for a command line it cannot parse, 1 for a
// configuration that cannot work.
func TestServerBinaryNameAndExitStatus(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "latchkey-server")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tests := []struct {
		args           []string
		status         int
		stdout, stderr string // prefixes
	}{
		{[]string{"-h"}, 0, "Usage: latchkey-server [flags]\n", ""},
		{[]string{"-no-such-flag"}, 2, "", "latchkey-server: flag provided but not defined: -no-such-flag (latchkey-server -h lists the flags)\n"},
		{[]string{"-redis-timeout", "soon"}, 2, "", "latchkey-server: invalid value \"soon\" for flag -redis-timeout"},
		{[]string{"serve"}, 2, "", "latchkey-server: unexpected arguments: serve (latchkey-server -h"},
		{[]string{"-addr", "0.0.0.0:0"}, 1, "", "latchkey-server: -addr 0.0.0.0:0 is not a loopback address"},
	}
	for _, tt := range tests {
		cmd := exec.Command(bin, tt.args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		status := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			status = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if status != tt.status || !strings.HasPrefix(stdout.String(), tt.stdout) || !strings.HasPrefix(stderr.String(), tt.stderr) {
			t.Errorf("latchkey-server %q = exit %d, stdout %.60q, stderr %q; want %d, %q..., %q...",
				tt.args, status, stdout.String(), stderr.String(), tt.status, tt.stdout, tt.stderr)
		}
	}
}
