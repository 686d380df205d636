package handlers_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/handlers"
)

// newProblemServer serves the router on a ProblemListener over TCP, for
// requests net/http reads itself; it returns the address and the log.
func newProblemServer(t *testing.T) (string, *syncBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := newJSONLogger(&logs)
	srv := &http.Server{Handler: newTestRouter(t, &fakeService{}, handlers.Config{Logger: log})}
	go func() { _ = srv.Serve(handlers.ProblemListener(ln, log)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), &logs
}

// rawExchange sends raw on a new connection and reads the answers to the
// requests it holds, n of them. It writes while it reads: the server may
// answer, and stop reading, before raw is all sent (a request over its
// header limit).
func rawExchange(t *testing.T, addr, raw string, n int) []*http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	written := make(chan error, 1)
	go func() { _, err := io.WriteString(c, raw); written <- err }()
	br := bufio.NewReader(c)
	var out []*http.Response
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d to %.200q: %v (writing it: %v)", len(out)+1, raw, err, <-written)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		out = append(out, resp)
	}
	return out
}

// TestNetHTTPRefusalsAreProblems: a request net/http refuses before any
// handler (a malformed escape in the path, a bad request line, a missing
// or second Host, a bad header, Content-Lengths that disagree) is answered
// as a 400 invalid-request problem naming what is wrong (the request, when
// net/http does not say which part), with the request ID in X-Request-Id,
// in the body and in a logged request line.
func TestNetHTTPRefusalsAreProblems(t *testing.T) {
	addr, logs := newProblemServer(t)
	tests := []struct {
		desc, raw, field, rule string
	}{
		{"malformed escape", "DELETE /v1/locks/a%zz?force=true HTTP/1.1\r\nHost: x\r\n\r\n", "request", "format"},
		{"truncated escape", "GET /v1/locks/a%2 HTTP/1.1\r\nHost: x\r\n\r\n", "request", "format"},
		{"space in the target", "GET /v1/locks/a b HTTP/1.1\r\nHost: x\r\n\r\n", "request", "format"},
		// net/http's bare 400 does not say which: the detail names every cause, not the request line alone.
		{"two Host headers", "GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", "request", "format"},
		{"two Content-Lengths", "POST /v1/locks/x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "request", "format"},
		{"malformed Content-Length", "POST /v1/locks/x HTTP/1.1\r\nHost: x\r\nContent-Length: two\r\n\r\n{}", "request", "format"},
		{"malformed Host", "GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n", "Host", "format"},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", "Host", "required"},
		{"bad header name", "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n", "header", "format"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			resp := rawExchange(t, addr, tt.raw, 1)[0]
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("answer: %d %q, want 400 application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			var p handlers.Problem
			if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
				t.Fatal(err)
			}
			id := resp.Header.Get("X-Request-Id")
			if p.Type != "invalid-request" || p.Status != 400 || p.Detail == "" || id == "" || p.RequestID != id {
				t.Errorf("problem %+v with X-Request-Id %q, want invalid-request with a detail and the header's ID", p, id)
			}
			if len(p.Errors) != 1 || p.Errors[0].Field != tt.field || p.Errors[0].Rule != tt.rule {
				t.Errorf("errors = %+v, want one naming %s, rule %s", p.Errors, tt.field, tt.rule)
			}
			if !strings.Contains(logs.String(), `"request_id":"`+id+`"`) {
				t.Errorf("no log line carries request_id %s:\n%s", id, logs.String())
			}
		})
	}
}

// TestNetHTTPRefusalsOfOtherStatusesAreProblems: the other answers
// net/http gives before any handler, text/plain or empty, are problems as
// its 400s are, each with its status, its own problem type and the field
// and rule at fault: request line and headers over the limit (431), an
// HTTP version other than 1.x (505), a transfer coding other than chunked
// (501), an Expect other than 100-continue (417, in the request's HTTP
// version).
func TestNetHTTPRefusalsOfOtherStatusesAreProblems(t *testing.T) {
	addr, logs := newProblemServer(t)
	tests := []struct {
		desc, raw   string
		status      int
		typ, proto  string
		field, rule string
	}{
		{"2 MB header", "GET /v1/locks/x HTTP/1.1\r\nHost: x\r\nBig: " + strings.Repeat("a", 2<<20) + "\r\n\r\n",
			http.StatusRequestHeaderFieldsTooLarge, "headers-too-large", "HTTP/1.1", "header", "max"},
		{"HTTP/9.9", "GET /v1/locks/x HTTP/9.9\r\nHost: x\r\n\r\n",
			http.StatusHTTPVersionNotSupported, "http-version-not-supported", "HTTP/1.1", "HTTP-version", "oneof"},
		{"HTTP/2.0 without TLS", "GET /v1/locks/x HTTP/2.0\r\nHost: x\r\n\r\n",
			http.StatusHTTPVersionNotSupported, "http-version-not-supported", "HTTP/1.1", "HTTP-version", "oneof"},
		{"gzip, chunked", "POST /v1/locks/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
			http.StatusNotImplemented, "transfer-coding-not-supported", "HTTP/1.1", "Transfer-Encoding", "oneof"},
		{"Expect: 200-ok", "POST /v1/locks/x HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
			http.StatusExpectationFailed, "expectation-failed", "HTTP/1.1", "Expect", "oneof"},
		{"Expect: 200-ok over HTTP/1.0", "POST /v1/locks/x HTTP/1.0\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}",
			http.StatusExpectationFailed, "expectation-failed", "HTTP/1.0", "Expect", "oneof"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			resp := rawExchange(t, addr, tt.raw, 1)[0]
			if resp.StatusCode != tt.status || resp.Proto != tt.proto || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("answer: %s %d %q, want %s %d application/problem+json", resp.Proto, resp.StatusCode, resp.Header.Get("Content-Type"), tt.proto, tt.status)
			}
			var p handlers.Problem
			if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
				t.Fatal(err)
			}
			id := resp.Header.Get("X-Request-Id")
			if p.Type != tt.typ || p.Status != tt.status || p.Detail == "" || id == "" || p.RequestID != id {
				t.Errorf("problem %+v with X-Request-Id %q, want %s with a detail and the header's ID", p, id, tt.typ)
			}
			if len(p.Errors) != 1 || p.Errors[0].Field != tt.field || p.Errors[0].Rule != tt.rule {
				t.Errorf("errors = %+v, want one naming %s, rule %s", p.Errors, tt.field, tt.rule)
			}
			if !strings.Contains(logs.String(), `"request_id":"`+id+`"`) {
				t.Errorf("no log line carries request_id %s:\n%s", id, logs.String())
			}
		})
	}
}

// TestProblemListenerPassesAnswers: answers to requests net/http could
// read go out as they are, several on one connection, problems included.
func TestProblemListenerPassesAnswers(t *testing.T) {
	addr, _ := newProblemServer(t)
	answers := rawExchange(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /v1/nope HTTP/1.1\r\nHost: x\r\n\r\n"+
		"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 3)
	want := []struct {
		status int
		ct     string
	}{{200, "application/json"}, {404, "application/problem+json"}, {405, "application/problem+json"}}
	for i, resp := range answers {
		if resp.StatusCode != want[i].status || resp.Header.Get("Content-Type") != want[i].ct {
			t.Errorf("answer %d: %d %q, want %d %q", i+1, resp.StatusCode, resp.Header.Get("Content-Type"), want[i].status, want[i].ct)
		}
	}
}
