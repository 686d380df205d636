package handlers_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/api"
	"github.com/latchkey/latchkey/handlers"
)

func TestOpenAPIDocument(t *testing.T) {
	rec := serve(t, newTestRouter(t, &fakeService{}, handlers.Config{}), newRequest(http.MethodGet, "/openapi.yaml", ""))
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d, want 200", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/yaml" {
		t.Errorf("Content-Type = %q, want application/yaml", ct)
	}
	if !bytes.Equal(rec.Body.Bytes(), api.Spec) {
		t.Error("/openapi.yaml is not the embedded api.Spec")
	}
}

func TestSwaggerUI(t *testing.T) {
	h := newTestRouter(t, &fakeService{}, handlers.Config{})

	rec := serve(t, h, newRequest(http.MethodGet, "/docs", ""))
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/docs/index.html" {
		t.Errorf("/docs = %d Location %q, want 301 to /docs/index.html", rec.Code, rec.Header().Get("Location"))
	}

	rec = serve(t, h, newRequest(http.MethodGet, "/docs/index.html", ""))
	if rec.Code != http.StatusOK {
		t.Fatalf("/docs/index.html status = %d, want 200", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("/docs/index.html Content-Type = %q, want text/html", ct)
	}
	m := swaggerURL.FindSubmatch(rec.Body.Bytes())
	if m == nil {
		t.Fatalf("no url setting in Swagger UI's index.html:\n%s", rec.Body)
	}
	var url string // a JavaScript string literal; the template escapes "/" as "\/"
	if err := json.Unmarshal(m[1], &url); err != nil {
		t.Fatalf("Swagger UI url %s: %v", m[1], err)
	}
	if url != "/openapi.yaml" {
		t.Errorf("Swagger UI url = %q, want /openapi.yaml", url)
	}
}

// swaggerURL finds the url option of SwaggerUIBundle in index.html.
var swaggerURL = regexp.MustCompile(`\burl:\s*("(?:[^"\\]|\\.)*")`)
