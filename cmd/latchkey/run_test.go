package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// problemServer answers every request with status and the problem body.
func problemServer(t *testing.T, status int, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestRefusedRequestStatus: a name or option the server refuses as invalid
// (400 invalid-request) is a usage error, exit 2, for every command that
// asks the server; a server that cannot serve is exit 69.
func TestRefusedRequestStatus(t *testing.T) {
	invalid := problemServer(t, http.StatusBadRequest,
		`{"type":"invalid-request","title":"Invalid request","status":400,"detail":"ttl must be at most 24h","errors":[{"field":"ttl","rule":"max"}]}`)
	forbidden := problemServer(t, http.StatusForbidden,
		`{"type":"forbidden","title":"Forbidden","status":403,"detail":"force-release needs the admin key"}`)
	held := problemServer(t, http.StatusConflict,
		`{"type":"election-held","title":"Election held","status":409,"detail":"the election has a leader (term 7)",`+
			`"leader":{"value":"10.0.0.7:5432","term":7,"owner":"db-1","since":"2026-11-23T05:00:00Z","ttl_ms":8000,"expires_at":"2026-11-23T05:00:08Z"}}`)
	tests := []struct {
		desc   string
		url    string
		args   []string
		status int
		stderr string
	}{
		{"lock with a bad option", invalid, []string{"lock", "-ttl", "1000h", "job", "--", "true"}, ExitUsage, "ttl"},
		{"elect with a bad option", invalid, []string{"elect", "-ttl", "1000h", "job", "--", "true"}, ExitUsage, "ttl"},
		{"elect while another leads", held, []string{"elect", "-value", "me", "job", "--", "true"}, ExitHeld,
			`not elected within 0s: term 7 leads with value "10.0.0.7:5432" (owner "db-1")`},
		{"elect without COMMAND", held, []string{"elect", "job"}, ExitUsage, "want a COMMAND"},
		{"elect with a bad -on-lost", held, []string{"elect", "-on-lost", "maybe", "job", "--", "true"}, ExitUsage, "-on-lost"},
		{"observe refused", invalid, []string{"observe", "job"}, ExitUsage, "ttl must be"},
		{"observe refused otherwise", forbidden, []string{"observe", "job"}, ExitUnavailable, "403"},
		{"status of a bad name", invalid, []string{"status", "job"}, ExitUsage, "ttl must be"},
		{"check with a bad cost", invalid, []string{"check", "-cost", "0", "p", "k"}, ExitUsage, "invalid-request"},
		{"force-release refused", forbidden, []string{"release", "-force", "job"}, ExitUnavailable, "403"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		getenv := func(k string) string {
			if k == "LATCHKEY_URL" {
				return tt.url
			}
			return ""
		}
		st := run(t.Context(), tt.args, getenv, &stdout, &stderr)
		if st != tt.status || !strings.Contains(stderr.String(), tt.stderr) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%s: latchkey %v = %d, stderr %q; want %d and one line with %q",
				tt.desc, tt.args, st, stderr.String(), tt.status, tt.stderr)
		}
	}
	if !strings.Contains(usage, "2 for a usage error or a name or option\nthe server refused as invalid") {
		t.Errorf("usage does not document exit 2 for a request refused as invalid:\n%s", usage)
	}
}
