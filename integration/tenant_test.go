package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
)

// The tenant secrets of the tests' keys files.
const (
	secretA      = "tenant-a-secret-0123456789"
	secretB      = "tenant-b-secret-0123456789"
	secretAdminA = "tenant-a-admin-0123456789"
	secretOps    = "ops-secret-0123456789"
)

func hashHex(secret string) string {
	s := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(s[:])
}

// bearer is the Authorization header pair of secret.
func bearer(secret string) []string { return []string{"Authorization", "Bearer " + secret} }

// tenantsFile is a keys file of tenants a and b (each with a key of every
// scope but admin; a also has an admin key) and an admin-section key ops,
// with quotas as given for a (YAML flow mapping body, "" for none).
func tenantsFile(quotasA string) string {
	all := "[locks:read, locks:write, ratelimit:check, ratelimit:gate]"
	return fmt.Sprintf(`tenants:
  a:
    quotas: {%s}
    keys:
      - {id: a-app, sha256: %s, scopes: %s}
      - {id: a-admin, sha256: %s, scopes: [admin, locks:read]}
  b:
    keys:
      - {id: b-app, sha256: %s, scopes: %s}
admin:
  keys:
    - {id: ops, sha256: %s, scopes: [admin, locks:read, locks:write]}
`, quotasA, hashHex(secretA), all, hashHex(secretAdminA), hashHex(secretB), all, hashHex(secretOps))
}

// writeKeysFile writes a keys file into a fresh directory and returns its path.
func writeKeysFile(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keys.yaml")
	rewriteKeysFile(t, p, content)
	return p
}

// rewriteKeysFile replaces the keys file at path whole.
func rewriteKeysFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".new", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// TestTenantLeaseQuota: a tenant at its lease quota gets 429
// quota-exceeded while another tenant is unaffected; a release frees a
// place at once.
func TestTenantLeaseQuota(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile("leases: 2"))))
	a, b := bearer(secretA), bearer(secretB)
	l1 := e.acquire(t, "one", `{"ttl":"1m"}`, a...)
	e.acquire(t, "two", `{"ttl":"1m"}`, a...)
	// Re-entering a lease takes no new place.
	wantStatus(t, e.do(t, "POST", "/v1/locks/one", `{"ttl":"1m"}`, append(a, "Lock-Token", l1.Token)...), http.StatusOK)
	r := e.do(t, "POST", "/v1/locks/three", `{"ttl":"1m"}`, a...)
	p := wantProblem(t, r, http.StatusTooManyRequests, "quota-exceeded")
	if retryAfter(t, r) < 1 || !strings.Contains(p.Detail, "2 leases") {
		t.Errorf("quota answer: Retry-After %q, detail %q", r.Header.Get("Retry-After"), p.Detail)
	}
	if st := e.inspect(t, "three", a...); st.Held {
		t.Errorf("three after the refusal: %v, want free", st)
	}
	for i := range 3 {
		e.acquire(t, fmt.Sprintf("b-%d", i), `{"ttl":"1m"}`, b...) // b has no lease quota
	}
	e.release(t, "one", l1.Token, a...)
	e.release(t, "one", l1.Token, a...) // the reentrant hold, then the lease
	e.acquire(t, "three", `{"ttl":"1m"}`, a...)
	// A force-release gives the place back too.
	wantProblem(t, e.do(t, "POST", "/v1/locks/four", `{"ttl":"1m"}`, a...), http.StatusTooManyRequests, "quota-exceeded")
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/two?force=true", "", bearer(secretAdminA)...), http.StatusNoContent)
	e.acquire(t, "four", `{"ttl":"1m"}`, a...)
	n, err := e.RDB.ZCard(t.Context(), locks.LeaseQuotaKey(e.Prefix, "a")).Result()
	if err != nil || n != 2 {
		t.Errorf("a's lease places = %d (%v), want 2", n, err)
	}
}

// TestTenantWaiterQuota: a tenant at its waiter quota gets 429 for one
// more waiting acquire at once; a try-once acquire is no waiter.
func TestTenantWaiterQuota(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile("waiters: 1"))))
	a := bearer(secretA)
	l := e.acquire(t, "busy", `{"ttl":"1m"}`, a...)
	done := make(chan response, 1)
	go func() { done <- e.send(t.Context(), "POST", "/v1/locks/busy", `{"ttl":"1m","wait":"30s"}`, a...) }()
	eventually(t, 10e9, "the first waiter is registered", func() bool { return e.inspect(t, "busy", a...).Waiters == 1 })
	wantProblem(t, e.do(t, "POST", "/v1/locks/busy", `{"ttl":"1m","wait":"30s"}`, a...), http.StatusTooManyRequests, "quota-exceeded")
	wantProblem(t, e.do(t, "POST", "/v1/locks/busy", `{"ttl":"1m"}`, a...), http.StatusConflict, "lock-held")
	e.release(t, "busy", l.Token, a...)
	wantStatus(t, <-done, http.StatusCreated)
	if n, _ := e.RDB.ZCard(t.Context(), locks.WaiterQuotaKey(e.Prefix, "a")).Result(); n != 0 {
		t.Errorf("a's waiter places after the wait: %d, want 0", n)
	}
}

// TestKeysReloadWhileRequestsFlow: keys are added, rotated and revoked
// while requests flow, without a restart: once a reload has returned, the
// next request with a revoked key is 401 and one with an added key is
// served; requests in flight across the reload all get an answer of their
// key's state (never a 5xx), and a wait begun before its key was revoked
// ends with its lease.
func TestKeysReloadWhileRequestsFlow(t *testing.T) {
	path := writeKeysFile(t, tenantsFile(""))
	// The revoked key's requests are failures: the throttle must not
	// count them against the test's one address.
	e := newTestEnv(t, withKeysFile(path), withRouterConfig(func(h *handlers.Config) { h.Auth.FailBurst = 1 << 30 }))
	a, b := bearer(secretA), bearer(secretB)
	held := e.acquire(t, "busy", `{"ttl":"1m"}`, b...)
	waited := make(chan response, 1)
	go func() { waited <- e.send(t.Context(), "POST", "/v1/locks/busy", `{"ttl":"1m","wait":"30s"}`, b...) }()
	eventually(t, 10e9, "b's waiter is registered", func() bool { return e.inspect(t, "busy", b...).Waiters == 1 })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := map[int]int{}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := e.send(t.Context(), "GET", "/v1/locks/flow", "", a...)
				if r.Err != nil || (r.Status != http.StatusOK && r.Status != http.StatusUnauthorized) {
					mu.Lock()
					bad[r.Status]++
					mu.Unlock()
				}
			}
		}()
	}
	// Add a key c to tenant a, and rotate b's: both in one reload.
	const secretC, secretB2 = "tenant-a-second-0123456789", "tenant-b-rotated-0123456789"
	next := strings.Replace(tenantsFile(""), "      - {id: a-admin", "      - {id: a-second, sha256: "+hashHex(secretC)+", scopes: [locks:read]}\n      - {id: a-admin", 1)
	next = strings.Replace(next, hashHex(secretB), hashHex(secretB2), 1)
	rewriteKeysFile(t, path, next)
	if changed, err := e.Keys.Reload(false); !changed || err != nil {
		t.Fatalf("reload: changed %v, err %v", changed, err)
	}
	wantStatus(t, e.do(t, "GET", "/v1/locks/flow", "", bearer(secretC)...), http.StatusOK)
	wantProblem(t, e.do(t, "GET", "/v1/locks/busy", "", b...), http.StatusUnauthorized, "unauthenticated")
	if st := e.inspect(t, "busy", bearer(secretB2)...); !st.Held || st.Waiters != 1 {
		t.Errorf("b's busy with the rotated key: %v, want held with one waiter", st)
	}
	// Revoke a's application key.
	rewriteKeysFile(t, path, strings.Replace(next, "      - {id: a-app, sha256: "+hashHex(secretA), "      - {id: a-app, sha256: "+hashHex("revoked-0123456789"), 1))
	if changed, err := e.Keys.Reload(false); !changed || err != nil {
		t.Fatalf("reload: changed %v, err %v", changed, err)
	}
	wantProblem(t, e.do(t, "GET", "/v1/locks/flow", "", a...), http.StatusUnauthorized, "unauthenticated")
	close(stop)
	wg.Wait()
	if len(bad) != 0 {
		t.Errorf("requests across the reloads got %v (status: count), want only 200 and 401", bad)
	}
	// The wait begun with b's old key ends with its lease.
	e.release(t, "busy", held.Token, bearer(secretB2)...)
	wantStatus(t, <-waited, http.StatusCreated)
	// A bad file keeps the active keys.
	rewriteKeysFile(t, path, "tenants: [")
	if changed, err := e.Keys.Reload(false); changed || err == nil {
		t.Errorf("reload of a bad file: changed %v, err %v; want refused", changed, err)
	}
	wantStatus(t, e.do(t, "GET", "/v1/locks/flow", "", bearer(secretC)...), http.StatusOK)
}

// TestTenantMetricsAndSecrets: metric labels carry only tenants of the
// file, a reload that removes a tenant removes its series, and neither
// metrics nor answers carry a secret.
func TestTenantMetricsAndSecrets(t *testing.T) {
	path := writeKeysFile(t, tenantsFile(""))
	e := newTestEnv(t, withKeysFile(path))
	for _, s := range []string{secretA, secretB, "unknown-secret-0123456789", "Bearer"} {
		e.do(t, "GET", "/v1/locks/x", "", bearer(s)...)
	}
	e.do(t, "GET", "/v1/locks/x", "", append(bearer(secretOps), "Latchkey-Tenant", "nosuchtenant")...)
	m := metrics(t, e)
	var body strings.Builder
	for series := range m {
		body.WriteString(series + "\n")
		if strings.HasPrefix(series, "latchkey_auth_requests_total{") {
			if !strings.Contains(series, `tenant="a"`) && !strings.Contains(series, `tenant="b"`) && !strings.Contains(series, `tenant="-"`) {
				t.Errorf("series %s has a tenant not in the keys file", series)
			}
		}
	}
	for _, s := range []string{secretA, secretB, "unknown-secret", "nosuchtenant"} {
		if strings.Contains(body.String(), s) {
			t.Errorf("metrics contain %q", s)
		}
	}
	if m[`latchkey_auth_requests_total{result="ok",tenant="b"}`] != 1 {
		t.Errorf("b's ok requests = %v, want 1", m[`latchkey_auth_requests_total{result="ok",tenant="b"}`])
	}
	// Tenant b leaves the file: its series go with it.
	rewriteKeysFile(t, path, strings.Replace(tenantsFile(""), "  b:\n    keys:\n      - {id: b-app, sha256: "+hashHex(secretB)+", scopes: [locks:read, locks:write, ratelimit:check, ratelimit:gate]}\n", "", 1))
	if changed, err := e.Keys.Reload(false); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	e.do(t, "GET", "/v1/locks/x", "", bearer(secretA)...)
	for series := range metrics(t, e) {
		if strings.Contains(series, `tenant="b"`) {
			t.Errorf("series %s outlived tenant b", series)
		}
	}
}
