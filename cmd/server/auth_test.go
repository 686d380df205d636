package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/testca"
)

func hashOf(secret string) string {
	s := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(s[:])
}

func keysFile(secrets ...string) []byte {
	var b strings.Builder
	b.WriteString("tenants:\n  team:\n    keys:\n")
	for i, s := range secrets {
		b.WriteString("      - {id: k" + string(rune('0'+i)) + ", sha256: " + hashOf(s) + ", scopes: [locks:read, locks:write]}\n")
	}
	return []byte(b.String())
}

// status sends one request with client and returns its status.
func status(t *testing.T, client *http.Client, method, url, secret string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeTLSWithKeys: with -tls-cert and -tls-key the server speaks
// HTTPS only, and with -api-keys every /v1 request needs a key.
func TestServeTLSWithKeys(t *testing.T) {
	ca := testca.New(t)
	certPEM, keyPEM := ca.Issue(t, "server", true)
	keys := writeFile(t, "keys.yaml", string(keysFile("first-secret-0123456789")))
	certFile, keyFile := writeFile(t, "cert.pem", string(certPEM)), writeFile(t, "key.pem", string(keyPEM))
	s := startServer(t, "-api-keys", keys, "-tls-cert", certFile, "-tls-key", keyFile)
	pool := ca.Pool()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + s.addr
	if got := status(t, client, http.MethodGet, base+"/healthz", ""); got != http.StatusOK {
		t.Errorf("GET /healthz over TLS: %d, want 200 (no key needed)", got)
	}
	if got := status(t, client, http.MethodPost, base+"/v1/locks/orders", ""); got != http.StatusUnauthorized {
		t.Errorf("acquire without a key: %d, want 401", got)
	}
	if got := status(t, client, http.MethodPost, base+"/v1/locks/orders", "first-secret-0123456789"); got != http.StatusCreated {
		t.Errorf("acquire with the key: %d, want 201", got)
	}
	if _, err := http.Get("http://" + s.addr + "/healthz"); err == nil {
		// A plain-HTTP request to a TLS server gets an HTTP 400 from
		// net/http, never an answer of Latchkey's.
		resp, _ := http.Get("http://" + s.addr + "/v1/locks/orders")
		if resp != nil && resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS port: %d, want net/http's 400", resp.StatusCode)
		}
	}
	wantHealthy(t, s.addr, "-tls-cert", certFile, "-tls-key", keyFile)
	line, _ := s.logs.find("listening")
	if line["tls"] != true || line["api_keys"] != true {
		t.Errorf("listening line %v, want tls and api_keys true", line)
	}
	if strings.Contains(s.logs.String(), "first-secret") {
		t.Error("the logs hold the secret")
	}
}

// wantHealthy runs -healthcheck against the server at addr with the TLS
// flags it was started with.
func wantHealthy(t *testing.T, addr string, tlsFlags ...string) {
	t.Helper()
	var out strings.Builder
	if err := run(t.Context(), append([]string{"-healthcheck", "-addr", addr}, tlsFlags...), env(), &out); err != nil {
		t.Errorf("-healthcheck over TLS: %v", err)
	}
	if !strings.Contains(out.String(), "healthy: GET https://") {
		t.Errorf("-healthcheck wrote %q, want an https probe", out.String())
	}
}

// TestServeMTLS: with -tls-client-ca a client without a certificate the
// CA signed cannot complete the handshake; one with it is served.
func TestServeMTLS(t *testing.T) {
	ca, other := testca.New(t), testca.New(t)
	certPEM, keyPEM := ca.Issue(t, "server", true)
	certFile, keyFile, caFile := writeFile(t, "cert.pem", string(certPEM)), writeFile(t, "key.pem", string(keyPEM)), writeFile(t, "ca.pem", string(ca.PEM))
	s := startServer(t, "-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", caFile)
	wantHealthy(t, s.addr, "-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", caFile)
	pool := ca.Pool()
	clientWith := func(c *testca.CA) *http.Client {
		cfg := &tls.Config{RootCAs: pool}
		if c != nil {
			cp, kp := c.Issue(t, "client", false)
			pair, err := tls.X509KeyPair(cp, kp)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	base := "https://" + s.addr + "/v1/locks/orders"
	if got := status(t, clientWith(ca), http.MethodGet, base, ""); got != http.StatusOK {
		t.Errorf("with a client certificate of the CA: %d, want 200", got)
	}
	for name, c := range map[string]*http.Client{"no certificate": clientWith(nil), "another CA's certificate": clientWith(other)} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: served %d, want a failed handshake", name, resp.StatusCode)
		}
	}
	line, _ := s.logs.find("listening")
	if line["mtls"] != true {
		t.Errorf("listening line %v, want mtls true", line)
	}
}

// TestKeysReloadOnChange: a changed keys file is picked up without a
// restart (the reload's log line is the event waited for): a revoked key
// gets 401 from then on, a rotated one is accepted; a bad file keeps the
// active keys and /readyz stays ready.
func TestKeysReloadOnChange(t *testing.T) {
	keys := writeFile(t, "keys.yaml", string(keysFile("old-secret-0123456789")))
	s := startServer(t, "-api-keys", keys, "-api-keys-reload-interval", "20ms")
	c := http.DefaultClient
	url := s.base + "/v1/locks/orders"
	if got := status(t, c, http.MethodGet, url, "old-secret-0123456789"); got != http.StatusOK {
		t.Fatalf("old key: %d, want 200", got)
	}
	waitLines := func(msg string, n int) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			s.logs.mu.Lock()
			count := 0
			for _, l := range s.logs.lines {
				if l["msg"] == msg {
					count++
				}
			}
			more := s.logs.added
			s.logs.mu.Unlock()
			if count >= n {
				return
			}
			select {
			case <-more:
			case <-deadline:
				t.Fatalf("no %d %q lines after 30s:\n%s", n, msg, s.logs)
			}
		}
	}
	// Rotate: the new secret replaces the old one.
	replaceFile(t, keys, string(keysFile("new-secret-0123456789")))
	waitLines("api keys reloaded", 1)
	if got := status(t, c, http.MethodGet, url, "old-secret-0123456789"); got != http.StatusUnauthorized {
		t.Errorf("revoked key after the reload: %d, want 401", got)
	}
	if got := status(t, c, http.MethodGet, url, "new-secret-0123456789"); got != http.StatusOK {
		t.Errorf("new key after the reload: %d, want 200", got)
	}
	replaceFile(t, keys, "tenants: [broken")
	waitLines("keys file refused; the active keys stay", 1)
	if got := status(t, c, http.MethodGet, url, "new-secret-0123456789"); got != http.StatusOK {
		t.Errorf("after a bad file: %d, want 200 (the active keys stay)", got)
	}
	if got := status(t, c, http.MethodGet, s.base+"/readyz", ""); got != http.StatusOK {
		t.Errorf("/readyz after a bad file: %d, want 200", got)
	}
	// A file that names no key (empty, as one truncated to be rewritten in
	// place is) is refused too: it would answer every request 401.
	replaceFile(t, keys, "")
	waitLines("keys file refused; the active keys stay", 2)
	if got := status(t, c, http.MethodGet, url, "new-secret-0123456789"); got != http.StatusOK {
		t.Errorf("after an empty file: %d, want 200 (the active keys stay)", got)
	}
}

// TestRunRefusesAKeysFileNamingNoKey: a server is not started on a keys
// file with no key, which would refuse every request.
func TestRunRefusesAKeysFileNamingNoKey(t *testing.T) {
	keys := writeFile(t, "keys.yaml", "tenants:\n  team:\n    keys: []\n")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := run(ctx, []string{"-addr", "127.0.0.1:0", "-api-keys", keys}, env(), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-api-keys: "+keys+": keys file: it names no key") {
		t.Fatalf("run with a keys file naming no key = %v, want a refusal naming the flag and file", err)
	}
}

// TestWarnOpenBeyondLoopback: listening beyond loopback without keys logs
// a warning; on loopback, or with keys, it does not.
func TestWarnOpenBeyondLoopback(t *testing.T) {
	const warning = "listening beyond loopback without API keys: anyone who can reach this address can take, inspect and hold any lock and spend any rate limit; set -api-keys (LATCHKEY_API_KEYS)"
	s := startServer(t, "-addr", "0.0.0.0:0", "-dev")
	if line, _ := s.logs.find(warning); line == nil || line["level"] != "WARN" {
		t.Errorf("no warning beyond loopback without keys; logs:\n%s", s.logs)
	}
	keys := writeFile(t, "keys.yaml", string(keysFile("a-secret-0123456789")))
	for _, args := range [][]string{{}, {"-addr", "0.0.0.0:0", "-dev", "-api-keys", keys}} {
		s := startServer(t, args...)
		if line, _ := s.logs.find(warning); line != nil {
			t.Errorf("args %v: warning %v, want none", args, line)
		}
	}
}
