package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// TestNginxGateway runs the documented deploy/nginx/nginx.conf in a real
// nginx, in front of a tiny upstream and a Latchkey server on real Redis,
// and sends requests from two client addresses (127.0.0.2 and 127.0.0.3,
// real loopback sources): the 4th request in 10 s from one address gets 429
// with Retry-After and the RateLimit headers, the other address is
// unaffected, and a forged X-Forwarded-For changes nothing. Under /api/ the
// key is the X-Api-Key header: a request without it gets 400, not nginx's
// 500. Then Latchkey stops: the fail-open location (/) still passes and the
// fail-closed one (/api/) answers 503, as deploy/nginx/policies.yaml says.
func TestNginxGateway(t *testing.T) {
	nginx := lookNginx(t)
	pol, err := loadPolicies(filepath.Join("..", "deploy", "nginx", "policies.yaml"))
	if err != nil {
		t.Fatalf("deploy/nginx/policies.yaml: %v", err)
	}
	checkNginxFailModes(t, pol)
	latchkey := newTestEnv(t, withPolicies(pol...), withTrustedProxies("127.0.0.1/32"))

	app, upstreamHits := gatewayApp(t)
	front := startNginx(t, nginx, hostPort(t, latchkey.URL), hostPort(t, app.URL))
	clientA := clientFrom(t, "127.0.0.2")
	clientB := clientFrom(t, "127.0.0.3")

	r := wantPassedThenDenied(t, clientA, front, 3, 10)
	if got, want := r.Header.Get("RateLimit-Policy"), `"per-ip";q=3;w=10`; got != want {
		t.Errorf("A request 4: RateLimit-Policy = %q, want %q", got, want)
	}

	// B is unaffected, even when it claims to be A.
	r = get(t, clientB, front, "X-Forwarded-For", "")
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("RateLimit"), `"per-ip";r=2;`) {
		t.Fatalf("B request 1: %d RateLimit %q, want 200 with r=2", r.Status, r.Header.Get("RateLimit"))
	}
	r = get(t, clientB, front, "X-Forwarded-For", "127.0.0.2")
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("RateLimit"), `"per-ip";r=1;`) {
		t.Fatalf("B forging A's address: %d RateLimit %q, want 200 counted for B (r=1)", r.Status, r.Header.Get("RateLimit"))
	}

	// A forging other addresses is still A, still over its limit.
	for _, forged := range []string{"198.51.100.7", "127.0.0.1", "198.51.100.8, 127.0.0.1"} {
		r = get(t, clientA, front, "X-Forwarded-For", forged)
		if r.Status != http.StatusTooManyRequests {
			t.Errorf("A forging X-Forwarded-For %q: status = %d, want 429", forged, r.Status)
		}
	}
	r = get(t, clientA, front, "X-Real-IP", "198.51.100.9")
	if r.Status != http.StatusTooManyRequests {
		t.Errorf("A forging X-Real-IP: status = %d, want 429", r.Status)
	}
	if got := upstreamHits.Load(); got != 5 {
		t.Errorf("the app served %d requests, want 5 (3 from A, 2 from B)", got)
	}

	// /api/ is keyed by X-Api-Key: with it the request passes, without it
	// the gate's 400 reaches the client as a 400.
	wantKeyedByAPIKey(t, clientA, front)
	if got := upstreamHits.Load(); got != 6 {
		t.Errorf("the app served %d requests, want 6", got)
	}

	// Latchkey goes away. nginx cannot reach it (connection refused): per-ip
	// (fail: open) lets B through, api-key (fail: closed) answers 503.
	latchkey.srv.Close()
	wantFailModesWithLatchkeyDown(t, clientB, front, upstreamHits)
}

// wantKeyedByAPIKey checks the gateway at front keys /api/ by X-Api-Key:
// with it the request passes (the policy's second request of key-1), without
// it the gate's 400 reaches the client as a 400 naming the header.
func wantKeyedByAPIKey(t *testing.T, c *http.Client, front string) {
	t.Helper()
	r := getPath(t, c, front, "/api/orders", "X-Api-Key", "key-1")
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("RateLimit"), `"api-key";r=2;`) {
		t.Fatalf("/api/ with X-Api-Key: %d RateLimit %q body %q, want 200 with r=2", r.Status, r.Header.Get("RateLimit"), r.Body)
	}
	r = getPath(t, c, front, "/api/orders", "", "")
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "X-Api-Key") {
		t.Errorf("/api/ without X-Api-Key: %d %q, want 400 naming X-Api-Key", r.Status, r.Body)
	}
}

// wantFailModesWithLatchkeyDown checks the gateway at front once Latchkey
// is gone: the per-ip policy (fail: open) lets c through to the app, the
// api-key one (fail: closed) answers 503 store-unavailable, and the app
// serves only the first.
func wantFailModesWithLatchkeyDown(t *testing.T, c *http.Client, front string, appHits *atomic.Int64) {
	t.Helper()
	hits := appHits.Load()
	r := get(t, c, front, "X-Forwarded-For", "")
	if r.Status != http.StatusOK || string(r.Body) != "hello from the app\n" {
		t.Errorf("/ with Latchkey down: %d %q, want 200 from the app (per-ip fails open)", r.Status, r.Body)
	}
	r = getPath(t, c, front, "/api/orders", "X-Api-Key", "key-1")
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), "store-unavailable") {
		t.Errorf("/api/ with Latchkey down: %d %q, want 503 store-unavailable (api-key fails closed)", r.Status, r.Body)
	}
	if got := appHits.Load() - hits; got != 1 {
		t.Errorf("with Latchkey down the app served %d requests, want 1 (the fail-open one)", got)
	}
}

// gatewayApp is the app behind a gateway under test: it answers "hello
// from the app" and counts the requests it serves.
func gatewayApp(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "hello from the app\n")
	}))
	t.Cleanup(app.Close)
	return app, &hits
}

// wantPassedThenDenied sends limit+1 requests to / through a gateway at
// front from c: the first limit reach the app with the RateLimit header
// counting down, the next is the per-ip policy's 429 with Retry-After
// (1..window seconds) and RateLimit r=0. Returns the 429.
func wantPassedThenDenied(t *testing.T, c *http.Client, front string, limit, window int) response {
	t.Helper()
	for i := 1; i <= limit; i++ {
		r := get(t, c, front, "X-Forwarded-For", "")
		if r.Status != http.StatusOK || string(r.Body) != "hello from the app\n" {
			t.Fatalf("request %d: %d %q, want 200 from the app", i, r.Status, r.Body)
		}
		if got, want := r.Header.Get("RateLimit"), fmt.Sprintf(`"per-ip";r=%d;t=`, limit-i); !strings.HasPrefix(got, want) {
			t.Errorf("request %d: RateLimit = %q, want prefix %q", i, got, want)
		}
	}
	r := get(t, c, front, "X-Forwarded-For", "")
	if r.Status != http.StatusTooManyRequests {
		t.Fatalf("request %d: status = %d, want 429; body %s", limit+1, r.Status, r.Body)
	}
	if ra := retryAfter(t, r); ra < 1 || ra > window {
		t.Errorf("request %d: Retry-After = %d, want 1..%d", limit+1, ra, window)
	}
	if got := r.Header.Get("RateLimit"); !strings.HasPrefix(got, `"per-ip";r=0;t=`) {
		t.Errorf("request %d: RateLimit = %q, want r=0", limit+1, got)
	}
	return r
}

// checkNginxFailModes checks that each auth location of deploy/nginx/nginx.conf
// sends Latchkey's unreachability to the handler of its policy's fail setting
// in deploy/nginx/policies.yaml, and that every policy has one.
func checkNginxFailModes(t *testing.T, pols []ratelimit.Policy) {
	t.Helper()
	conf, err := os.ReadFile(filepath.Join("..", "deploy", "nginx", "nginx.conf"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?s)location = /_latchkey/([a-z0-9-]+) \{[^}]*?proxy_pass http://latchkey/v1/ratelimit/gate/([a-z0-9-]+);[^}]*?` +
		`error_page 404 500 502 503 504 = @latchkey_down_(open|closed);[^}]*\}`)
	found := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(conf), -1) {
		if m[1] != m[2] {
			t.Errorf("nginx.conf: location /_latchkey/%s asks the gate of policy %s", m[1], m[2])
		}
		found[m[2]] = m[3]
	}
	for _, p := range pols {
		got, ok := found[p.Name]
		switch {
		case !ok:
			t.Errorf("nginx.conf has no auth location for policy %s with error_page ... = @latchkey_down_open|closed", p.Name)
		case got != string(p.Fail):
			t.Errorf("nginx.conf fails %s for policy %s, policies.yaml says fail: %s", got, p.Name, p.Fail)
		}
		delete(found, p.Name)
	}
	for name := range found {
		t.Errorf("nginx.conf asks the gate of policy %s, which policies.yaml does not define", name)
	}
}

// lookNginx finds the nginx binary, skipping t (or failing it, when the
// environment requires every tool) when there is none.
func lookNginx(t *testing.T) string {
	t.Helper()
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			skipOrFail(t, "nginx is not installed (Debian: apt-get install nginx-light)")
		}
		nginx = "/usr/sbin/nginx"
	}
	return nginx
}

// startNginx runs deploy/nginx/nginx.conf with its upstream addresses
// replaced by latchkey and app, listening on a free loopback port, and
// returns its base URL. nginx is stopped when t ends.
func startNginx(t *testing.T, bin, latchkey, app string) string {
	t.Helper()
	conf, err := os.ReadFile(filepath.Join("..", "deploy", "nginx", "nginx.conf"))
	if err != nil {
		t.Fatal(err)
	}
	listen := closedPort(t)
	s := string(conf)
	for old, repl := range map[string]string{
		"server 127.0.0.1:8080;": "server " + latchkey + ";",
		"server 127.0.0.1:3000;": "server " + app + ";",
		"listen 127.0.0.1:8000;": "listen " + listen + ";",
	} {
		if !strings.Contains(s, old) {
			t.Fatalf("deploy/nginx/nginx.conf no longer contains %q", old)
		}
		s = strings.Replace(s, old, repl, 1)
	}
	return runNginx(t, bin, s, listen)
}

// runNginx runs nginx with conf, whose http block listens on listen, its
// temporary files and logs in a directory of t's, and returns its base URL
// once it listens. nginx is stopped when t ends.
func runNginx(t *testing.T, bin, conf, listen string) string {
	t.Helper()
	dir := t.TempDir()
	if !strings.Contains(conf, "http {") {
		t.Fatalf("nginx configuration without an http block:\n%s", conf)
	}
	s := strings.Replace(conf, "http {", "http {\n    access_log off;\n    client_body_temp_path "+dir+"/body;\n    proxy_temp_path "+dir+
		"/proxy;\n    fastcgi_temp_path "+dir+"/fastcgi;\n    uwsgi_temp_path "+dir+"/uwsgi;\n    scgi_temp_path "+dir+"/scgi;", 1)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	global := "daemon off; master_process on; worker_processes 1; pid " + dir + "/nginx.pid; error_log " + dir + "/error.log warn;"
	if out, err := exec.Command(bin, "-t", "-p", dir, "-c", path, "-g", global).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", path, "-g", global)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt) // SIGINT: fast shutdown of master and workers
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "error.log")); err == nil {
				t.Logf("nginx error.log:\n%s", b)
			}
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not listen on %s: %v", listen, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + listen
}

// clientFrom returns an HTTP client whose connections come from the given
// loopback address.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// get sends GET / through nginx, with one optional header.
func get(t *testing.T, c *http.Client, base, header, value string) response {
	t.Helper()
	return getPath(t, c, base, "/", header, value)
}

// getPath sends GET path through nginx, with one optional header.
func getPath(t *testing.T, c *http.Client, base, path, header, value string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if value != "" {
		req.Header.Set(header, value)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

func hostPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestNginxKeepsUpstreamConnections runs deploy/nginx/nginx.conf in a real
// nginx and counts the TCP connections Latchkey and the app accept while 8
// clients send 400 requests through it: 200 allowed ones (half of them from
// clients that send Accept: application/json, as API clients do) and 200 to
// /api/, most of them denied. nginx reuses an upstream connection only after
// reading the whole answer, and it never reads an auth subrequest's body;
// with the shipped template (HEAD to a keep-alive upstream, and the app's
// upstream kept alive as nginx recommends) it opens at most one connection
// per concurrent request to each, not one per request.
func TestNginxKeepsUpstreamConnections(t *testing.T) {
	nginx := lookNginx(t)
	pol, err := loadPolicies(filepath.Join("..", "deploy", "nginx", "policies.yaml"))
	if err != nil {
		t.Fatalf("deploy/nginx/policies.yaml: %v", err)
	}
	for i := range pol {
		if pol[i].Name == "per-ip" {
			pol[i].Limit.Limit = 1000 // every request to / is allowed: the answer nginx must not choke on is the 200
		}
	}
	latchkey := newTestEnv(t, withPolicies(pol...), withTrustedProxies("127.0.0.1/32"))
	// The same handler behind a server that counts the connections it accepts.
	var accepted atomic.Int64
	counted := httptest.NewUnstartedServer(latchkey.srv.Config.Handler)
	counted.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	counted.Start()
	t.Cleanup(counted.Close)

	var upstreamHits, appAccepted atomic.Int64
	app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		_, _ = io.WriteString(w, "hello from the app\n")
	}))
	app.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			appAccepted.Add(1)
		}
	}
	app.Start()
	t.Cleanup(app.Close)
	front := startNginx(t, nginx, hostPort(t, counted.URL), hostPort(t, app.URL))

	const clients, perClient = 8, 25
	type result struct {
		path   string
		status int
		limit  string
	}
	results := make(chan result, 2*clients*perClient)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := clientFrom(t, "127.0.0.2")
			for i := range perClient {
				accept := ""
				if i%2 == 0 {
					accept = "application/json"
				}
				for _, req := range []struct{ path, header, value string }{
					{"/", "Accept", accept},
					{"/api/orders", "X-Api-Key", "key-" + strconv.Itoa(c)}, // 3 allowed per key, then denied
				} {
					r, err := sendThrough(t.Context(), client, front+req.path, req.header, req.value)
					if err != nil {
						t.Errorf("GET %s: %v", req.path, err)
						return
					}
					results <- result{req.path, r.Status, r.Header.Get("RateLimit")}
				}
			}
		}()
	}
	wg.Wait()
	close(results)

	counts := map[string]int{}
	for r := range results {
		counts[r.path+" "+strconv.Itoa(r.status)]++
		if r.limit == "" {
			t.Errorf("GET %s: %d without a RateLimit header: the gate did not decide", r.path, r.status)
		}
	}
	want := map[string]int{"/ 200": clients * perClient, "/api/orders 200": clients * 3, "/api/orders 429": clients * (perClient - 3)}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("%s: %d answers, want %d (all answers: %v)", k, counts[k], n, counts)
		}
	}
	if got := upstreamHits.Load(); got != int64(clients*perClient+clients*3) {
		t.Errorf("the app served %d requests, want %d", got, clients*perClient+clients*3)
	}
	n, conns := 2*clients*perClient, accepted.Load()
	t.Logf("%d gated requests from %d concurrent clients: Latchkey accepted %d connections from nginx", n, clients, conns)
	if conns < 1 || conns > clients {
		t.Errorf("Latchkey accepted %d connections from nginx for %d requests from %d concurrent clients, want 1..%d: "+
			"nginx does not keep its connections to the gate", conns, n, clients, clients)
	}
	if conns := appAccepted.Load(); conns < 1 || conns > clients {
		t.Errorf("the app accepted %d connections from nginx for %d requests from %d concurrent clients, want 1..%d: "+
			"nginx does not keep its connections to the app", conns, upstreamHits.Load(), clients, clients)
	}
}

// sendThrough sends GET url with one optional header and reads the answer.
func sendThrough(ctx context.Context, c *http.Client, url, header, value string) (response, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return response{}, err
	}
	if value != "" {
		req.Header.Set(header, value)
	}
	resp, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}
