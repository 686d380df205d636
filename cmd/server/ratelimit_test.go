package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// writeFile writes content to name in a fresh temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunRefusesBadRateLimitConfig(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing file", []string{"-ratelimit-policies", "/nonexistent/policies.yaml"}, "-ratelimit-policies: policy file: open /nonexistent/policies.yaml"},
		{"unknown field", []string{"-ratelimit-policies", writeFile(t, "p.yaml", "policies:\n  a:\n    limit: 3\n    window: 10s\n    rate: 2\n")},
			`line 5: unknown field "rate" in policies.a: the fields there are key, limit,`},
		{"zero window", []string{"-ratelimit-policies", writeFile(t, "p.yaml", "policies:\n  a:\n    limit: 3\n    window: 0s\n")},
			`policy "a": window must be at least 1s, got 0s`},
		{"limit 0 in JSON", []string{"-ratelimit-policies", writeFile(t, "p.json", `{"policies":{"b":{"limit":0,"window":"1m"}}}`)},
			`policy "b": limit must be at least 1, got 0`},
		{"bad algorithm", []string{"-ratelimit-policies", writeFile(t, "p.yaml", "policies:\n  c:\n    limit: 3\n    window: 10s\n    algorithm: leaky\n")},
			`policy "c": algorithm must be one of fixed_window, sliding_window, token_bucket, got "leaky"`},
		{"bad deny status", []string{"-ratelimit-policies", writeFile(t, "p.yaml", "policies:\n  d:\n    limit: 3\n    window: 10s\n    deny_status: 500\n")},
			`policy "d": deny_status must be 401, 403 or 429`},
		{"bad default algorithm", []string{"-ratelimit-default-algorithm", "leaky"}, `policy "default": algorithm must be one of`},
		{"unknown self policy", []string{"-ratelimit-self-policy", "nope"}, "-ratelimit-self-policy nope: no such policy (known: default, anonymous)"},
		{"bad trusted proxy", []string{"-trusted-proxies", "10.0.0.0/8,nonsense"}, `-trusted-proxies: trusted proxy "nonsense" is not a CIDR`},
		{"bad IPv6 prefix", []string{"-ipv6-prefix", "129"}, "-ipv6-prefix must be between 1 and 128, got 129"},
		{"bad timeout", []string{"-ratelimit-timeout", "0s"}, "-ratelimit-timeout must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(t.Context(), append([]string{"-addr", "127.0.0.1:0"}, tt.args...), env(), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestRunServesRateLimits wires a policy file, trusted proxies and
// self-protection through run, on the embedded store.
func TestRunServesRateLimits(t *testing.T) {
	policies := writeFile(t, "policies.yaml", "policies:\n  per-ip:\n    limit: 3\n    window: 10s\n  self:\n    limit: 100\n    window: 1m\n")
	s := startServer(t, "-ratelimit-policies", policies, "-trusted-proxies", "127.0.0.1/32", "-ratelimit-legacy-headers",
		"-ratelimit-self-policy", "self")
	for i := 1; i <= 4; i++ {
		resp, d := s.call(t, http.MethodGet, "/v1/ratelimit/gate/per-ip", "", "Accept", "application/json", "X-Forwarded-For", "203.0.113.5")
		want := http.StatusOK
		if i == 4 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want || d["key"] != "203.0.113.5" {
			t.Fatalf("request %d: %d key %v, want %d for the forwarded client", i, resp.StatusCode, d["key"], want)
		}
		if resp.Header.Get("RateLimit-Policy") != `"per-ip";q=3;w=10` || resp.Header.Get("X-RateLimit-Limit") != "3" {
			t.Errorf("request %d: headers %v", i, resp.Header)
		}
	}
	// The default per-IP policy exists too (60 per minute).
	if resp, d := s.call(t, http.MethodPost, "/v1/ratelimit/check", `{"policy":"default"}`); resp.StatusCode != http.StatusOK || d["limit"] != 60.0 {
		t.Errorf("default policy: %d %v, want 200 with limit 60", resp.StatusCode, d)
	}
}

// Without API keys or a self-protection policy, a client beyond loopback
// (here a forwarded one) is held to the anonymous policy, 100 requests a
// second by default; a loopback client is not.
func TestRunLimitsAnonymousClientsBeyondLoopback(t *testing.T) {
	c, err := parseConfig(nil, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.RateLimit.AnonymousLimit != 100 || c.RateLimit.AnonymousWindow != time.Second {
		t.Errorf("anonymous policy = %d per %s, want 100 per 1s by default", c.RateLimit.AnonymousLimit, c.RateLimit.AnonymousWindow)
	}
	s := startServer(t, "-trusted-proxies", "127.0.0.1/32", "-ratelimit-anonymous-limit", "2", "-ratelimit-anonymous-window", "1m")
	for i := 1; i <= 3; i++ {
		resp, _ := s.call(t, http.MethodGet, "/v1/locks/orders", "", "X-Forwarded-For", "198.51.100.7")
		want := http.StatusOK
		if i == 3 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d from a client beyond loopback: %d, want %d", i, resp.StatusCode, want)
		}
		if got := resp.Header.Get("RateLimit-Policy"); i == 3 && got != `"anonymous";q=2;w=60` {
			t.Errorf("RateLimit-Policy = %q, want the anonymous policy's", got)
		}
	}
	for i := 1; i <= 3; i++ {
		if resp, _ := s.call(t, http.MethodGet, "/v1/locks/orders", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d from loopback: %d, want 200 (loopback is not limited)", i, resp.StatusCode)
		}
	}
}

func TestLoadPoliciesDeployExample(t *testing.T) {
	ps := readPolicyFile(t, filepath.Join("..", "..", "deploy", "nginx", "policies.yaml"))
	byName := map[string]ratelimit.Policy{}
	for _, p := range ps {
		byName[p.Name] = p
	}
	for _, want := range []struct {
		name, key string
		fail      ratelimit.FailMode
	}{{"per-ip", "ip", ratelimit.FailOpen}, {"api-key", "header:X-Api-Key", ratelimit.FailClosed}} {
		p, ok := byName[want.name]
		if !ok || p.Key != want.key || p.Fail != want.fail || p.DenyStatus != 403 || p.Limit.Limit != 3 || p.Window != 10*time.Second {
			t.Errorf("deploy/nginx/policies.yaml = %+v, want %s keyed on %s, 3 per 10s denying with 403, failing %s", ps, want.name, want.key, want.fail)
		}
	}
	if len(ps) != 2 {
		t.Errorf("deploy/nginx/policies.yaml has %d policies, want per-ip and api-key", len(ps))
	}
	if _, err := ratelimit.ParsePolicyFile("bad.yaml", []byte("policies: [")); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("unparsable file error = %v, want one naming the file", err)
	}
}

func TestLoadPoliciesExampleFile(t *testing.T) {
	ps := readPolicyFile(t, filepath.Join("..", "..", "deploy", "policies.example.yaml"))
	if err := (ratelimit.Config{Policies: ps}).Validate(); err != nil {
		t.Fatalf("deploy/policies.example.yaml: %v", err)
	}
	if len(ps) != 5 {
		t.Errorf("deploy/policies.example.yaml holds %d policies, want 5", len(ps))
	}
}

// TestLoadQuotaExampleFile: the README's quota session's policies load,
// their calendar months in Berlin.
func TestLoadQuotaExampleFile(t *testing.T) {
	ps := readPolicyFile(t, filepath.Join("..", "..", "deploy", "quota.example.yaml"))
	if err := (ratelimit.Config{Policies: ps}).Validate(); err != nil {
		t.Fatalf("deploy/quota.example.yaml: %v", err)
	}
	if len(ps) != 2 || ps[1].Calendar == nil || ps[1].Calendar.Period != "month" || ps[1].Calendar.Timezone != "Europe/Berlin" {
		t.Errorf("deploy/quota.example.yaml holds %+v, want llm and tokens, a month in Berlin", ps)
	}
}

// readPolicyFile reads and parses a policy file as -ratelimit-policies does.
func readPolicyFile(t *testing.T, path string) []ratelimit.Policy {
	t.Helper()
	b, err := os.ReadFile(path)
	if err == nil {
		var ps []ratelimit.Policy
		if ps, err = ratelimit.ParsePolicyFile(path, b); err == nil {
			return ps
		}
	}
	t.Fatal(err)
	return nil
}

// policyVersion reads the active policy set's version and api's limit.
func (s *testServer) policyVersion(t *testing.T) (string, float64) {
	t.Helper()
	resp, body := s.call(t, http.MethodGet, "/v1/ratelimit/policies", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/ratelimit/policies = %d %v", resp.StatusCode, body)
	}
	version, _ := body["version"].(string)
	ps, _ := body["policies"].([]any)
	for _, p := range ps {
		if m, _ := p.(map[string]any); m["name"] == "api" {
			limit, _ := m["limit"].(float64)
			return version, limit
		}
	}
	t.Fatalf("no policy api in %v", body)
	return "", 0
}

// The server reloads its policy file when it changes (polled) and keeps the
// active set when the new file is bad; the default policy stays in every set.
func TestRunReloadsChangedPolicyFile(t *testing.T) {
	path := writeFile(t, "policies.yaml", "policies:\n  api:\n    limit: 3\n    window: 10s\n")
	s := startServer(t, "-ratelimit-policies", path, "-ratelimit-reload-interval", "20ms")
	v1, limit := s.policyVersion(t)
	if limit != 3 || len(v1) != 12 {
		t.Fatalf("version %q limit %v, want 12 hex digits and 3", v1, limit)
	}
	replaceFile(t, path, "policies:\n  api:\n    limit: 5\n    window: 10s\n")
	s.logs.waitFor(t, "rate-limit policies reloaded", s.done)
	v2, limit := s.policyVersion(t)
	if limit != 5 || v2 == v1 {
		t.Fatalf("after the change: version %q limit %v, want a new version and 5", v2, limit)
	}
	if resp, d := s.call(t, http.MethodPost, "/v1/ratelimit/check", `{"policy":"default"}`); resp.StatusCode != http.StatusOK || d["limit"] != 60.0 {
		t.Errorf("default policy after the reload: %d %v", resp.StatusCode, d)
	}
	replaceFile(t, path, "policies:\n  api:\n    limit: -1\n    window: 10s\n")
	line := s.logs.waitFor(t, "rate-limit policy file refused; the active policies stay", s.done)
	if err, _ := line["err"].(string); !strings.Contains(err, `policy "api": limit must be at least 1`) {
		t.Errorf("refusal says %q, want the policy and field", err)
	}
	if v, limit := s.policyVersion(t); v != v2 || limit != 5 {
		t.Errorf("after a bad file: version %q limit %v, want %q and 5 kept", v, limit, v2)
	}
}

// SIGHUP reloads the file at once, with polling off; a file dropping the
// self-protection policy is refused.
func TestRunReloadsPolicyFileOnSIGHUP(t *testing.T) {
	path := writeFile(t, "policies.yaml", "policies:\n  api:\n    limit: 3\n    window: 10s\n  self:\n    limit: 100\n    window: 1m\n")
	s := startServer(t, "-ratelimit-policies", path, "-ratelimit-reload-interval", "0s", "-ratelimit-self-policy", "self")
	v1, _ := s.policyVersion(t)
	replaceFile(t, path, "policies:\n  api:\n    limit: 4\n    window: 10s\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	line := s.logs.waitFor(t, "rate-limit policy file refused; the active policies stay", s.done)
	if err, _ := line["err"].(string); !strings.Contains(err, "-ratelimit-self-policy self: no such policy") {
		t.Errorf("refusal says %q, want the missing self policy", err)
	}
	if v, limit := s.policyVersion(t); v != v1 || limit != 3 {
		t.Fatalf("version %q limit %v, want the first set kept", v, limit)
	}
	replaceFile(t, path, "policies:\n  api:\n    limit: 4\n    window: 10s\n  self:\n    limit: 100\n    window: 1m\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.logs.waitFor(t, "rate-limit policies reloaded", s.done)
	if v, limit := s.policyVersion(t); v == v1 || limit != 4 {
		t.Errorf("after SIGHUP: version %q limit %v, want a new version and 4", v, limit)
	}
}

// replaceFile replaces path's contents whole (a new file renamed over it),
// so a poll never reads half a file.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
