package handlers_test

import (
	"context"
	"fmt"
	"net/http"
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
