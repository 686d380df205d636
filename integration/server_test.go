package integration

import (
	"net/http"
	"strings"
	"testing"
)

func TestHarnessValidatesAgainstSpec(t *testing.T) {
	e := newTestEnv(t)
	r := e.do(t, "POST", "/v1/locks/harness", `{"ttl":"5s"}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("status = %d, want 201; body %s", r.Status, r.Body)
	}
	if tok := r.Header.Get("Lock-Token"); len(tok) != 22 {
		t.Errorf("Lock-Token = %q, want 22 characters", tok)
	}
	r = e.do(t, "GET", "/readyz", "")
	if r.Status != http.StatusOK || r.JSON(t)["store"] != "redis" {
		t.Errorf("readyz = %d %s", r.Status, r.Body)
	}
}

// The operational routes answer through the spec-checking client: each is
// documented with the status and content type it serves.
func TestOperationalRoutesAreDocumented(t *testing.T) {
	e := newTestEnv(t)
	for _, c := range []struct{ path, contentType string }{
		{"/healthz", "application/json"},
		{"/readyz", "application/json"},
		{"/openapi.yaml", "application/yaml"},
		{"/metrics", "text/plain"},
		{"/docs/index.html", "text/html"},
	} {
		r := e.do(t, "GET", c.path, "")
		if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), c.contentType) {
			t.Errorf("GET %s = %d %q, want 200 %s", c.path, r.Status, r.Header.Get("Content-Type"), c.contentType)
		}
	}
}
