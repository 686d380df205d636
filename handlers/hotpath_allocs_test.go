package handlers_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/auth"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// discardWriter is a ResponseWriter that keeps only the status and the
// size of the body, and reuses its header map, so allocation counts are the
// router's own (httptest's recorder copies the headers on every answer).
type discardWriter struct {
	h      http.Header
	status int
	bytes  int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.bytes += len(p)
	return len(p), nil
}

func (w *discardWriter) reset() {
	clear(w.h)
	w.status, w.bytes = 0, 0
}

// TestHotPathAllocations counts the allocations of one gate decision and
// one check through the whole router (request ID, log, metrics, recoverer,
// authentication, routing, the handler, its headers and body), with a
// service fake that answers at once: what Latchkey's HTTP layer allocates
// per decision, whatever the machine's load. The bounds sit a little above
// the counts reached; one past them is a new allocation on every gateway
// request.
func TestHotPathAllocations(t *testing.T) {
	pol := perIP(403)
	fake := decisionFake(pol, ratelimit.Decision{Allowed: true, Policy: "per-ip", Limit: 3, Remaining: 2,
		Window: 10 * time.Second, ResetAfter: 7 * time.Second})
	trusted, err := handlers.ParseTrustedProxies("127.0.0.1/32")
	if err != nil {
		t.Fatal(err)
	}
	open := newTestRouter(t, fake, handlers.Config{
		RateLimit: handlers.RateLimitConfig{ClientIP: handlers.ClientIPConfig{TrustedProxies: trusted}},
	})
	set := mustKeySet(t, "")
	keyed := newTestRouter(t, fake, handlers.Config{
		RateLimit: handlers.RateLimitConfig{ClientIP: handlers.ClientIPConfig{TrustedProxies: trusted}},
		Auth:      handlers.AuthConfig{Keys: func() *auth.KeySet { return set }},
	})
	const checkBody = `{"policy":"per-ip","key":"user-1"}`
	tests := []struct {
		name   string
		keys   bool // API keys are on, and the request sends one
		method string
		target string
		body   string
		header []string
		status int
		max    float64
	}{
		// 11 allocations today (16 before the edge middleware and the check
		// reader were trimmed): the request ID, its context with the status
		// recorder, the request's copy with it; chi's context value, its copy
		// of the request and the path value (two); the client's key and the
		// request's source; the decision's two header values.
		{"gate GET", false, http.MethodGet, "/v1/ratelimit/gate/per-ip", "", []string{"X-Forwarded-For", "10.1.2.3"}, http.StatusOK, 12},
		// As GET: nginx's auth_request asks with HEAD.
		{"gate HEAD", false, http.MethodHead, "/v1/ratelimit/gate/per-ip", "", []string{"X-Forwarded-For", "10.1.2.3"}, http.StatusOK, 12},
		// 10 today (20 before): as the gate without a path value or client
		// key, plus the body's two strings; no decoder, validator, limit
		// reader or body buffer of its own.
		{"check", false, http.MethodPost, "/v1/ratelimit/check", checkBody, []string{"Content-Type", "application/json"}, http.StatusOK, 11},
		// 18 today (26 before the route context was pooled and a tenant's
		// label stopped being stored anew): as the gate GET, plus the key's
		// and the tenant's context values and their copy of the request,
		// the throttle's client key, the key set's lookup.
		{"gate GET with an API key", true, http.MethodGet, "/v1/ratelimit/gate/per-ip", "",
			[]string{"X-Forwarded-For", "10.1.2.3", "Authorization", "Bearer " + testSecret("ratelimit-gate")}, http.StatusOK, 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.target, nil)
			req.RemoteAddr = "127.0.0.1:40000"
			for i := 0; i+1 < len(tt.header); i += 2 {
				req.Header.Set(tt.header[i], tt.header[i+1])
			}
			body := strings.NewReader(tt.body)
			if tt.body != "" {
				req.Body = readCloser{body}
				req.ContentLength = int64(len(tt.body))
			}
			h := open
			if tt.keys {
				h = keyed
			}
			w := &discardWriter{h: http.Header{}}
			serveOnce := func() {
				w.reset()
				body.Reset(tt.body)
				h.ServeHTTP(w, req)
			}
			serveOnce()
			if w.status != tt.status {
				t.Fatalf("status = %d, want %d", w.status, tt.status)
			}
			got := testing.AllocsPerRun(500, serveOnce)
			t.Logf("%s: %.0f allocations per request", tt.name, got)
			if got > tt.max+raceSlack {
				t.Errorf("%s allocates %.0f times per request, want at most %.0f", tt.name, got, tt.max)
			}
		})
	}
}

// readCloser is a request body that closes to nothing and can be read
// again after a Reset of its reader.
type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }
