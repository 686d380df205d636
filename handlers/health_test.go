package handlers_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/store"
)

func TestHealthz(t *testing.T) {
	fake := &fakeService{}
	rec := serve(t, newTestRouter(t, fake, handlers.Config{}), newRequest(http.MethodGet, "/healthz", ""))
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d, want 200", rec.Code)
	}
	if diff := cmp.Diff(map[string]any{"status": "ok"}, decodeBody(t, rec)); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Errorf("liveness called the service: %v", calls)
	}
}

func TestReadyz(t *testing.T) {
	tests := []struct {
		desc   string
		store  string
		err    error
		status int
		want   map[string]any
	}{
		{"ready, default store", "", nil, http.StatusOK, map[string]any{"status": "ready", "store": "redis"}},
		{"ready, embedded", "embedded", nil, http.StatusOK, map[string]any{"status": "ready", "store": "embedded"}},
		{"store down", "redis", fmt.Errorf("ping: %w", store.ErrUnavailable), http.StatusServiceUnavailable,
			map[string]any{"status": "unavailable", "store": "redis", "detail": "the store does not answer or cannot run scripts"}},
		{"too few replicas", "redis", &store.ReplicasError{Connected: 0, Required: 1}, http.StatusServiceUnavailable,
			map[string]any{"status": "unavailable", "store": "redis",
				"detail":   "the primary has 0 replicas connected, 1 required (-redis-min-replicas): every lock change is refused until enough are",
				"replicas": map[string]any{"connected": 0.0, "required": 1.0}}},
		{"too few replicas on a cluster primary", "redis", fmt.Errorf("ready: %w", &store.ReplicasError{Primary: "10.0.0.7:6379", Connected: 1, Required: 2}),
			http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "store": "redis",
				"detail":   "primary 10.0.0.7:6379 has 1 replicas connected, 2 required (-redis-min-replicas): every lock change is refused until enough are",
				"replicas": map[string]any{"connected": 1.0, "required": 2.0, "primary": "10.0.0.7:6379"}}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			fake := &fakeService{ReadyFn: func(context.Context) error { return tt.err }}
			rec := serve(t, newTestRouter(t, fake, handlers.Config{Store: tt.store}), newRequest(http.MethodGet, "/readyz", ""))
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d", rec.Code, tt.status)
			}
			if diff := cmp.Diff(tt.want, decodeBody(t, rec)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHeadAnswersAsGet: HEAD on the operations routes answers what GET
// answers (status, Content-Type, X-Request-Id) without the body, with API
// keys on or off (they stay open either way).
func TestHeadAnswersAsGet(t *testing.T) {
	for _, cfg := range []handlers.Config{{}, authConfig(mustKeySet(t, ""))} {
		fake := &fakeService{ReadyFn: func(context.Context) error { return nil }}
		srv := httptest.NewServer(newTestRouter(t, fake, cfg))
		t.Cleanup(srv.Close)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml", "/docs", "/docs/", "/docs/index.html"} {
			t.Run(fmt.Sprintf("%s keys %v", path, cfg.Auth.Keys != nil), func(t *testing.T) {
				get := mustDo(t, client, http.MethodGet, srv.URL+path)
				head := mustDo(t, client, http.MethodHead, srv.URL+path)
				if head.status != get.status || head.status >= 400 {
					t.Errorf("HEAD status = %d, GET status = %d; want the same success", head.status, get.status)
				}
				if got, want := head.header.Get("Content-Type"), get.header.Get("Content-Type"); got != want {
					t.Errorf("HEAD Content-Type = %q, GET's %q", got, want)
				}
				if head.header.Get("X-Request-Id") == "" {
					t.Error("HEAD answer has no X-Request-Id")
				}
				if len(head.body) != 0 {
					t.Errorf("HEAD body = %q, want none", head.body)
				}
			})
		}
	}
}

// httpAnswer is an answer read whole.
type httpAnswer struct {
	status int
	header http.Header
	body   []byte
}

// mustDo sends a request without a body through client and reads the answer.
func mustDo(t *testing.T, client *http.Client, method, url string) httpAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return httpAnswer{resp.StatusCode, resp.Header, body}
}
