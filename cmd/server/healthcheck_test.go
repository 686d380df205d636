package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthCheck(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	t.Cleanup(ok.Close)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(failing.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closedAddr := closed.Listener.Addr().String()
	closed.Close()

	_, okPort, _ := net.SplitHostPort(ok.Listener.Addr().String())
	withRedis := map[string]string{"LATCHKEY_REDIS_URL": "redis://127.0.0.1:6379"}
	tests := []struct {
		name    string
		addr    string
		env     map[string]string
		wantErr string // "" means healthy
	}{
		{"healthy", ok.Listener.Addr().String(), nil, ""},
		{"wildcard host probes loopback", ":" + okPort, withRedis, ""},
		{"unspecified IPv4 probes loopback", "0.0.0.0:" + okPort, withRedis, ""},
		{"not 200", failing.Listener.Addr().String(), nil, "status 503, want 200"},
		{"nothing listening", closedAddr, nil, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			getenv := func(k string) string { return tt.env[k] }
			err := run(t.Context(), []string{"-healthcheck", "-addr", tt.addr}, getenv, &out)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("run -healthcheck = %v, want nil", err)
				}
				if !strings.Contains(out.String(), "healthy") {
					t.Errorf("output = %q, want it to say healthy", out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("run -healthcheck = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
