package handlers_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/handlers"
)

// TestDashboardServed: /ui/ and its files are served without a key, also
// with API keys on, each with the page's Content-Security-Policy (its own
// files and server only) and its media type; HEAD answers as GET without a
// body; /ui redirects with a relative Location, which keeps a proxy's path
// prefix; an unknown file is a 404 and a query parameter a 400, as on the
// other routes.
func TestDashboardServed(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		cfg := handlers.Config{}
		if keyed {
			cfg = authConfig(mustKeySet(t, ""))
		}
		h := newTestRouter(t, &fakeService{}, cfg)
		for _, tt := range []struct{ path, typ string }{
			{"/ui/", "text/html; charset=utf-8"},
			{"/ui/app.js", "text/javascript; charset=utf-8"},
			{"/ui/style.css", "text/css; charset=utf-8"},
			{"/ui/favicon.svg", "image/svg+xml"},
		} {
			rec := serve(t, h, newRequest(http.MethodGet, tt.path, ""))
			if rec.Code != http.StatusOK || rec.Body.Len() == 0 {
				t.Fatalf("keys %v: GET %s = %d (%d bytes), want 200 with a body", keyed, tt.path, rec.Code, rec.Body.Len())
			}
			if got := rec.Header().Get("Content-Type"); got != tt.typ {
				t.Errorf("GET %s: Content-Type = %q, want %q", tt.path, got, tt.typ)
			}
			csp := rec.Header().Get("Content-Security-Policy")
			for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
				if !strings.Contains(csp, want) {
					t.Errorf("GET %s: Content-Security-Policy %q lacks %q", tt.path, csp, want)
				}
			}
			if strings.Contains(csp, "unsafe") {
				t.Errorf("GET %s: Content-Security-Policy %q allows something unsafe", tt.path, csp)
			}
			head := serve(t, h, newRequest(http.MethodHead, tt.path, ""))
			if head.Code != http.StatusOK || head.Header().Get("Content-Type") != tt.typ {
				t.Errorf("HEAD %s = %d %q, want 200 %q", tt.path, head.Code, head.Header().Get("Content-Type"), tt.typ)
			}
		}
		rec := serve(t, h, newRequest(http.MethodGet, "/ui", ""))
		if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "ui/" {
			t.Errorf("GET /ui = %d Location %q, want 301 to the relative ui/", rec.Code, rec.Header().Get("Location"))
		}
		req := newRequest(http.MethodGet, "/ui/index.html", "")
		wantProblem(t, serve(t, h, req), req, http.StatusNotFound, "not-found")
		req = newRequest(http.MethodGet, "/ui/?key=secret", "")
		p := wantProblem(t, serve(t, h, req), req, http.StatusBadRequest, "invalid-request")
		wantField(t, p, "key")
		req = newRequest(http.MethodPost, "/ui/", "")
		wantProblem(t, serve(t, h, req), req, http.StatusMethodNotAllowed, "method-not-allowed")
	}
}

// TestDashboardIsSelfContained reads the page as the browser would and
// as its Content-Security-Policy demands: every URL it names is relative
// (so it works behind a path prefix) and on its own server, no script or
// style is inline, and no key is ever stored outside the page's memory.
func TestDashboardIsSelfContained(t *testing.T) {
	h := newTestRouter(t, &fakeService{}, handlers.Config{})
	body := func(path string) string {
		rec := serve(t, h, newRequest(http.MethodGet, path, ""))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s = %d", path, rec.Code)
		}
		return rec.Body.String()
	}
	page, script, style := body("/ui/"), body("/ui/app.js"), body("/ui/style.css")

	refs := regexp.MustCompile(`(?i)\b(?:src|href)\s*=\s*"([^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 3 {
		t.Fatalf("the page names %d files, want its script, style sheet and icon", len(refs))
	}
	for _, m := range refs {
		if ref := m[1]; strings.HasPrefix(ref, "/") || strings.Contains(ref, ":") {
			t.Errorf("the page names %q: want a URL relative to the page", ref)
		}
	}
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]`), // a script with a body
		regexp.MustCompile(`(?i)<style`),
		regexp.MustCompile(`(?i)\sstyle\s*=`),
		regexp.MustCompile(`(?i)\son[a-z]+\s*=`), // an event handler attribute
	} {
		if loc := bad.FindStringIndex(page); loc != nil {
			t.Errorf("the page has inline code the policy forbids: %q", page[loc[0]:min(loc[1]+20, len(page))])
		}
	}
	script = strings.ReplaceAll(script, `"http://www.w3.org/2000/svg"`, "") // a namespace, not a URL fetched
	for _, bad := range []string{"localStorage", "sessionStorage", "document.cookie", "indexedDB", "innerHTML", "eval(", "'/v1", "\"/v1", "http://", "https://"} {
		if strings.Contains(script, bad) {
			t.Errorf("app.js uses %q", bad)
		}
	}
	if strings.Contains(style, "url(") || strings.Contains(style, "@import") {
		t.Error("style.css loads something of its own")
	}
}
