package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUnknownRoutesWithKeys: with API keys on, a path or method no route
// serves is a 404 or 405 problem whatever key is sent (a 405 with Allow
// listing the path's methods), and changes nothing in Redis. These requests are not in api/openapi.yaml, so they go through
// a client that does not check answers against it.
func TestUnknownRoutesWithKeys(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile(""))))
	raw := *e
	raw.Client = &http.Client{}
	held := e.acquire(t, "x", `{"ttl":"1m"}`, bearer(secretA)...)
	before := e.dumps(t)
	requests := []struct {
		method, path string
		status       int
		typ          string
		allow        string
	}{
		{"GET", "/v1/nope", http.StatusNotFound, "not-found", ""},
		{"POST", "/v1/locks/", http.StatusNotFound, "not-found", ""},
		{"PATCH", "/v1/locks/x", http.StatusMethodNotAllowed, "method-not-allowed", "DELETE, GET, POST"},
		{"GET", "/v1/locks/x/hold", http.StatusMethodNotAllowed, "method-not-allowed", "POST"},
		{"DELETE", "/v1/locks/x/renew?force=true", http.StatusMethodNotAllowed, "method-not-allowed", "POST"},
		{"POST", "/healthz", http.StatusMethodNotAllowed, "method-not-allowed", "GET, HEAD"},
	}
	keys := map[string][]string{"no key": nil, "a wrong key": bearer("not-a-key-0123456789"),
		"the application's key": append(bearer(secretA), "Lock-Token", held.Token), "the admin's key": bearer(secretOps)}
	for _, rq := range requests {
		for desc, headers := range keys {
			r := raw.do(t, rq.method, rq.path, "", headers...)
			p := wantProblem(t, r, rq.status, rq.typ)
			if p.RequestID == "" || p.RequestID != r.Header.Get("X-Request-Id") {
				t.Errorf("%s %s with %s: request_id %q, X-Request-Id %q", rq.method, rq.path, desc, p.RequestID, r.Header.Get("X-Request-Id"))
			}
			if got := r.Header.Get("Allow"); got != rq.allow {
				t.Errorf("%s %s with %s: Allow %q, want %q", rq.method, rq.path, desc, got, rq.allow)
			}
		}
	}
	if diff := cmp.Diff(before, e.dumps(t)); diff != "" {
		t.Errorf("unrouted requests changed Redis (-before +after):\n%s", diff)
	}
	if st := e.inspect(t, "x", bearer(secretA)...); !st.Held {
		t.Errorf("x after the unrouted requests: %v, want held", st)
	}
}

// TestHeadOnOperationsRoutes: HEAD on the operations routes answers as GET
// does, with no body, with API keys on (they stay open). /docs/ is
// /docs/{path} with an empty path, which the spec's router does not match,
// so it goes through a client that does not check answers against it.
func TestHeadOnOperationsRoutes(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile(""))))
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	e.Client.CheckRedirect = noRedirect
	raw := *e
	raw.Client = &http.Client{CheckRedirect: noRedirect}
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/healthz", http.StatusOK}, {"/readyz", http.StatusOK}, {"/metrics", http.StatusOK},
		{"/openapi.yaml", http.StatusOK}, {"/docs", http.StatusMovedPermanently},
		{"/docs/", http.StatusMovedPermanently}, {"/docs/index.html", http.StatusOK},
	} {
		client := e
		if tc.path == "/docs/" {
			client = &raw
		}
		r := client.do(t, "HEAD", tc.path, "")
		if r.Status != tc.status || len(r.Body) != 0 || r.Header.Get("X-Request-Id") == "" {
			t.Errorf("HEAD %s: status %d, %d body bytes, X-Request-Id %q; want %d, none, an ID",
				tc.path, r.Status, len(r.Body), r.Header.Get("X-Request-Id"), tc.status)
		}
	}
}

// TestNetHTTPRefusalsAreProblems: a force-release net/http refuses before
// any handler (a path with a malformed escape, a second Host or
// Content-Length header, headers over its limit, an HTTP version, transfer
// coding or expectation it does not serve) is a problem+json with a
// request ID and the status net/http chose, as the server answers it, and
// changes nothing (a force-release of a lock whose name it spoils
// included).
func TestNetHTTPRefusalsAreProblems(t *testing.T) {
	e := newTestEnv(t)
	held := e.acquire(t, "victim", `{"ttl":"1m"}`)
	before := e.dumps(t)
	for _, rq := range []struct {
		target, version, extra string
		status                 int
		typ, field             string
	}{
		{"/v1/locks/victim%zz?force=true", "HTTP/1.1", "", 400, "invalid-request", "request"},
		{"/v1/locks/a%zz", "HTTP/1.1", "", 400, "invalid-request", "request"},
		{"/v1/locks/victim%2", "HTTP/1.1", "", 400, "invalid-request", "request"},
		{"/v1/locks/victim?force=true", "HTTP/1.1", "Host: other\r\n", 400, "invalid-request", "request"},
		{"/v1/locks/victim?force=true", "HTTP/1.1", "Content-Length: 1\r\nContent-Length: 2\r\n", 400, "invalid-request", "request"},
		{"/v1/locks/victim?force=true", "HTTP/1.1", "Big: " + strings.Repeat("a", 2<<20) + "\r\n", 431, "headers-too-large", "header"},
		{"/v1/locks/victim?force=true", "HTTP/9.9", "", 505, "http-version-not-supported", "HTTP-version"},
		{"/v1/locks/victim?force=true", "HTTP/2.0", "", 505, "http-version-not-supported", "HTTP-version"},
		{"/v1/locks/victim?force=true", "HTTP/1.1", "Transfer-Encoding: gzip, chunked\r\n", 501, "transfer-coding-not-supported", "Transfer-Encoding"},
		{"/v1/locks/victim?force=true", "HTTP/1.1", "Expect: 200-ok\r\nContent-Length: 2\r\n", 417, "expectation-failed", "Expect"},
	} {
		target := rq.target
		c, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		// Written while the answer is read: the server answers a request
		// over its header limit, and stops reading, before it is all sent.
		go fmt.Fprintf(c, "DELETE %s %s\r\nHost: latchkey\r\n%sAuthorization: Bearer %s\r\nLock-Token: %s\r\n\r\n", target, rq.version, rq.extra, testAdminKey, held.Token)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("DELETE %s: %v", target, err)
		}
		var p problemJSON
		derr := json.NewDecoder(resp.Body).Decode(&p)
		_ = c.Close()
		if derr != nil || resp.StatusCode != rq.status || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("DELETE %s %s: %d %q (%v), want a %d problem", target, rq.version, resp.StatusCode, resp.Header.Get("Content-Type"), derr, rq.status)
		}
		if p.Type != rq.typ || p.RequestID == "" || p.RequestID != resp.Header.Get("X-Request-Id") || len(p.Errors) != 1 || p.Errors[0].Field != rq.field {
			t.Errorf("DELETE %s %s: problem %+v, X-Request-Id %q, want %s naming %s", target, rq.version, p, resp.Header.Get("X-Request-Id"), rq.typ, rq.field)
		}
	}
	if diff := cmp.Diff(before, e.dumps(t)); diff != "" {
		t.Errorf("refused requests changed Redis (-before +after):\n%s", diff)
	}
}
