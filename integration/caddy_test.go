package integration

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// TestCaddyGateway runs the documented deploy/caddy/Caddyfile in a real
// Caddy (forward_auth, the protocol of Traefik's ForwardAuth), in front of
// a tiny upstream and a Latchkey server on real Redis with
// deploy/caddy/policies.yaml, from two client addresses (127.0.0.2 and
// 127.0.0.3): three requests from one address pass with the RateLimit
// headers, the fourth gets the policy's 429 with Retry-After and the
// rate-limited problem, the other address is unaffected, and a forged
// X-Forwarded-For changes nothing. Under /api/ the key is the X-Api-Key
// header: without it the gate's 400 reaches the client. Then Latchkey
// stops: the fail-open route (/) still passes and the fail-closed one
// (/api/) answers 503, as the policies' fail settings say.
func TestCaddyGateway(t *testing.T) {
	caddy, err := exec.LookPath("caddy")
	if err != nil {
		skipOrFail(t, "caddy is not installed (Debian: apt-get install caddy)")
	}
	pols, err := loadPolicies(filepath.Join("..", "deploy", "caddy", "policies.yaml"))
	if err != nil {
		t.Fatalf("deploy/caddy/policies.yaml: %v", err)
	}
	checkCaddyFailModes(t, pols)
	latchkey := newTestEnv(t, withPolicies(pols...), withTrustedProxies("127.0.0.1/32"))

	app, upstreamHits := gatewayApp(t)
	front := runCaddy(t, caddy, hostPort(t, latchkey.URL), hostPort(t, app.URL))
	clientA, clientB := clientFrom(t, "127.0.0.2"), clientFrom(t, "127.0.0.3")

	r := wantPassedThenDenied(t, clientA, front, 3, 10)
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" || !strings.Contains(string(r.Body), `"rate-limited"`) {
		t.Errorf("A request 4: %s %s, want the rate-limited problem", ct, r.Body)
	}

	// B is unaffected, even when it claims to be A; A forging another
	// address is still A.
	r = get(t, clientB, front, "X-Forwarded-For", "127.0.0.2")
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("RateLimit"), `"per-ip";r=2;`) {
		t.Fatalf("B claiming to be A: %d RateLimit %q, want 200 counted for B (r=2)", r.Status, r.Header.Get("RateLimit"))
	}
	if got, want := r.Header.Get("RateLimit-Policy"), `"per-ip";q=3;w=10`; got != want {
		t.Errorf("an allowed request: RateLimit-Policy = %q, want %q", got, want)
	}
	if r = get(t, clientA, front, "X-Forwarded-For", "198.51.100.7"); r.Status != http.StatusTooManyRequests {
		t.Errorf("A forging X-Forwarded-For: status = %d, want 429", r.Status)
	}
	if got := upstreamHits.Load(); got != 4 {
		t.Errorf("the app served %d requests, want 4 (3 from A, 1 from B)", got)
	}

	wantKeyedByAPIKey(t, clientA, front)

	// Latchkey goes away: per-ip (fail: open) lets B through, api-key
	// (fail: closed) answers 503.
	latchkey.srv.Close()
	wantFailModesWithLatchkeyDown(t, clientB, front, upstreamHits)
}

// checkCaddyFailModes checks that the Caddyfile's handle_errors sends the
// routes of fail-closed policies (by their gate's path) to a 503 and the
// others to the app, as deploy/caddy/policies.yaml says.
func checkCaddyFailModes(t *testing.T, pols []ratelimit.Policy) {
	t.Helper()
	conf, err := os.ReadFile(filepath.Join("..", "deploy", "caddy", "Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	gates := regexp.MustCompile(`(?s)route ([^ {]*) ?\{\s*forward_auth \S+ \{\s*uri /v1/ratelimit/gate/([a-z0-9-]+)`).FindAllStringSubmatch(string(conf), -1)
	closed := regexp.MustCompile(`(?s)@latchkey_down_closed \{\s*path (\S+)`).FindStringSubmatch(string(conf))
	if len(gates) != len(pols) || closed == nil {
		t.Fatalf("Caddyfile: %d forward_auth routes for %d policies, closed routes %v", len(gates), len(pols), closed)
	}
	for _, g := range gates {
		var fail ratelimit.FailMode
		for _, p := range pols {
			if p.Name == g[2] {
				fail = p.Fail
			}
		}
		isClosed := g[1] != "" && g[1] == closed[1]
		if want := fail == ratelimit.FailClosed; isClosed != want {
			t.Errorf("Caddyfile: route %q of policy %s fails closed %v, policies.yaml says fail: %s", g[1], g[2], isClosed, fail)
		}
	}
}

// runCaddy runs deploy/caddy/Caddyfile with Latchkey at latchkey and the
// app at app, listening on a free loopback port, and returns its base URL
// once it listens. Caddy is stopped when t ends.
func runCaddy(t *testing.T, bin, latchkey, app string) string {
	t.Helper()
	listen := closedPort(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "run", "--config", filepath.Join("..", "deploy", "caddy", "Caddyfile"), "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "LATCHKEY="+latchkey, "APP="+app, "LISTEN="+listen, "CADDY_ADMIN=off",
		"HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start caddy: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("caddy's log:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return "http://" + listen
		}
		select {
		case <-done:
			t.Fatalf("caddy exited before it listened on %s", listen)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy does not listen on %s: %v", listen, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
