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

// TestMalformedEscapeIsAProblem: a path with a malformed escape, or a
// second Host or Content-Length header, which net/http refuses before any
// handler, is a 400 invalid-request problem+json with a request ID, as the
// server answers it, and changes nothing (a force-release of a lock whose
// name it spoils included).
func TestMalformedEscapeIsAProblem(t *testing.T) {
	e := newTestEnv(t)
	held := e.acquire(t, "victim", `{"ttl":"1m"}`)
	before := e.dumps(t)
	for _, rq := range []struct{ target, extra string }{
		{"/v1/locks/victim%zz?force=true", ""},
		{"/v1/locks/a%zz", ""},
		{"/v1/locks/victim%2", ""},
		{"/v1/locks/victim?force=true", "Host: other\r\n"},
		{"/v1/locks/victim?force=true", "Content-Length: 1\r\nContent-Length: 2\r\n"},
	} {
		target := rq.target
		c, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "DELETE %s HTTP/1.1\r\nHost: latchkey\r\n%sAuthorization: Bearer %s\r\nLock-Token: %s\r\n\r\n", target, rq.extra, testAdminKey, held.Token)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("DELETE %s: %v", target, err)
		}
		var p problemJSON
		derr := json.NewDecoder(resp.Body).Decode(&p)
		_ = c.Close()
		if derr != nil || resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("DELETE %s: %d %q (%v), want a 400 problem", target, resp.StatusCode, resp.Header.Get("Content-Type"), derr)
		}
		if p.Type != "invalid-request" || p.RequestID == "" || p.RequestID != resp.Header.Get("X-Request-Id") || len(p.Errors) != 1 || p.Errors[0].Field != "request" {
			t.Errorf("DELETE %s: problem %+v, X-Request-Id %q", target, p, resp.Header.Get("X-Request-Id"))
		}
	}
	if diff := cmp.Diff(before, e.dumps(t)); diff != "" {
		t.Errorf("refused requests changed Redis (-before +after):\n%s", diff)
	}
}
