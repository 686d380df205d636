package integration

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
)

// envImage names the Latchkey image under test (for example one built with
// `docker build -t latchkey:latest .`). Unset, the image tests skip, or fail
// when LATCHKEY_REQUIRE_DOCKER=1.
const envImage = "LATCHKEY_TEST_IMAGE"

// latchkeyImage returns the image under test, or skips t (fails it when
// Docker is required) when there is none on the engine (it is never pulled)
// or no Docker engine answers.
func latchkeyImage(t testing.TB) string {
	t.Helper()
	image := os.Getenv(envImage)
	if image == "" {
		skipOrFailDocker(t, envImage+" is not set: no Latchkey image to test (build one with docker build -t latchkey:latest . and set "+envImage+"=latchkey:latest)")
	}
	dockerHealthy(t)
	if err := localImage(image); err != nil {
		skipOrFailDocker(t, "Latchkey image "+image+" is not on the Docker engine ("+err.Error()+"): build it with docker build -t "+image+" .")
	}
	return image
}

// skipOrFailDocker skips t with the reason, or fails it when
// LATCHKEY_REQUIRE_DOCKER=1.
func skipOrFailDocker(t testing.TB, reason string) {
	t.Helper()
	if envTrue(envRequireDocker) {
		t.Fatalf("%s (and %s=1 requires it)", reason, envRequireDocker)
	}
	skips.add(reason)
	t.Skip(reason)
}

// newNetwork creates a private Docker network for t, removed when t ends.
func newNetwork(t testing.TB) *testcontainers.DockerNetwork {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nw, err := network.New(ctx, network.WithLabels(runLabels()))
	if nw != nil {
		testcontainers.CleanupNetwork(t, nw)
	}
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	return nw
}

// latchkeyContainer is the Latchkey image running as a container.
type latchkeyContainer struct {
	*testcontainers.DockerContainer
	URL string // base URL on the host's published port
}

// startLatchkey runs image on nw with the given environment (on top of
// LATCHKEY_ADDR=:8080 from the image), its port published on 127.0.0.1
// only, and waits for /healthz. The container is removed when t ends; if t
// failed, its log is printed first.
func startLatchkey(t testing.TB, image string, nw *testcontainers.DockerNetwork, env map[string]string) *latchkeyContainer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := testcontainers.Run(ctx, image,
		loopbackPorts("8080/tcp"),
		testcontainers.WithEnv(env),
		testcontainers.WithLabels(runLabels()),
		network.WithNetwork([]string{"latchkey"}, nw),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/healthz").WithPort("8080/tcp").WithStartupTimeout(30*time.Second)),
	)
	testcontainers.CleanupContainer(t, c)
	if c != nil {
		t.Cleanup(func() { logOnFailure(t, c) })
	}
	if err != nil {
		t.Fatalf("start %s: %v", image, err)
	}
	host, err := c.Host(ctx)
	if err != nil {
		t.Fatalf("container host: %v", err)
	}
	port, err := c.MappedPort(ctx, "8080/tcp")
	if err != nil {
		t.Fatalf("container port: %v", err)
	}
	return &latchkeyContainer{DockerContainer: c, URL: "http://" + net.JoinHostPort(host, port.Port())}
}

// logOnFailure prints the tail of a container's log when t has failed.
func logOnFailure(t testing.TB, c *testcontainers.DockerContainer) {
	if !t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := c.Logs(ctx)
	if err != nil {
		t.Logf("container log: %v", err)
		return
	}
	defer rc.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	out := b.String()
	if len(out) > 8<<10 {
		out = "..." + out[len(out)-8<<10:]
	}
	t.Logf("log of %s:\n%s", c.GetContainerID()[:12], out)
}

// TestImageStack runs the Latchkey image next to a Redis container on a
// private network, as docker-compose.yml does, and drives it over HTTP
// through its published port; last, it restarts Redis under it.
func TestImageStack(t *testing.T) {
	singleNode(t)
	image := latchkeyImage(t)
	nw := newNetwork(t)
	rc, _ := startRedisContainer(t, network.WithNetwork([]string{"redis"}, nw))
	lk := startLatchkey(t, image, nw, map[string]string{
		"LATCHKEY_REDIS_URL":     "redis://redis:6379/0",
		"LATCHKEY_REDIS_TIMEOUT": "1s",
		"LATCHKEY_LOG_LEVEL":     "debug",
	})
	e := remoteEnv(t, lk.URL)

	t.Run("published on loopback only", func(t *testing.T) {
		wantLoopbackPorts(t, lk)
	})

	t.Run("runs as non-root", func(t *testing.T) {
		info, err := lk.Inspect(t.Context())
		if err != nil {
			t.Fatalf("inspect: %v", err)
		}
		if got, want := info.Config.User, "65532:65532"; got != want {
			t.Errorf("image user = %q, want %q", got, want)
		}
	})

	t.Run("ready on redis", func(t *testing.T) {
		r := e.do(t, "GET", "/readyz", "")
		if r.Status != http.StatusOK {
			t.Fatalf("readyz status = %d, want 200; body %s", r.Status, r.Body)
		}
		if got := r.JSON(t)["store"]; got != "redis" {
			t.Errorf("readyz store = %v, want redis", got)
		}
	})

	t.Run("acquire and release", func(t *testing.T) {
		r := e.do(t, "POST", "/v1/locks/image-stack", `{"ttl":"10s"}`)
		if r.Status != http.StatusCreated {
			t.Fatalf("acquire status = %d, want 201; body %s", r.Status, r.Body)
		}
		token := r.Header.Get("Lock-Token")
		r = e.do(t, "POST", "/v1/locks/image-stack", `{"ttl":"10s"}`)
		if r.Status != http.StatusConflict {
			t.Fatalf("second acquire without the token: status = %d, want 409; body %s", r.Status, r.Body)
		}
		r = e.do(t, "DELETE", "/v1/locks/image-stack", "", "Lock-Token", token)
		if r.Status != http.StatusOK {
			t.Fatalf("release status = %d, want 200; body %s", r.Status, r.Body)
		}
		if got := r.JSON(t)["released"]; got != true {
			t.Errorf("released = %v, want true", got)
		}
		if st := e.inspect(t, "image-stack"); st.Held {
			t.Errorf("after release: %v, want held false", st)
		}
	})

	t.Run("rate-limit decision", func(t *testing.T) {
		body := `{"key":"image-stack","limit":1,"window":"10s","algorithm":"fixed_window"}`
		r := e.do(t, "POST", "/v1/ratelimit/check", body)
		if r.Status != http.StatusOK {
			t.Fatalf("first check: status = %d, want 200; body %s", r.Status, r.Body)
		}
		if r.Header.Get("RateLimit") == "" {
			t.Errorf("first check: no RateLimit header")
		}
		r = e.do(t, "POST", "/v1/ratelimit/check", body)
		if r.Status != http.StatusTooManyRequests {
			t.Fatalf("second check over a limit of 1: status = %d, want 429; body %s", r.Status, r.Body)
		}
		if r.Header.Get("Retry-After") == "" {
			t.Errorf("denied check: no Retry-After header")
		}
	})

	t.Run("survives a Redis restart", func(t *testing.T) {
		// Redis is addressed by its network alias, so it is found again
		// whatever address it gets when it comes back.
		reloadsBefore := scriptReloads(t, e)
		stopTimeout := 10 * time.Second
		if err := rc.Stop(t.Context(), &stopTimeout); err != nil {
			t.Fatalf("stop redis: %v", err)
		}
		r := e.doWithin(t, 5*time.Second, "POST", "/v1/locks/image-restart", `{"ttl":"10s"}`)
		if r.Status != http.StatusServiceUnavailable || r.JSON(t)["type"] != "store-unavailable" {
			t.Fatalf("acquire while Redis is down: %d %s, want 503 store-unavailable", r.Status, r.Body)
		}
		if err := rc.Start(t.Context()); err != nil {
			t.Fatalf("start redis again: %v", err)
		}
		// Start returns once Redis accepts connections: the very next call
		// must succeed, loading the scripts Redis forgot.
		r = e.doWithin(t, 5*time.Second, "POST", "/v1/locks/image-restart", `{"ttl":"10s"}`)
		if r.Status != http.StatusCreated {
			t.Fatalf("acquire after the restart: status = %d, want 201; body %s", r.Status, r.Body)
		}
		if got := scriptReloads(t, e); got <= reloadsBefore {
			t.Errorf("latchkey_script_reloads_total = %v after the restart, want more than %v (NOSCRIPT reload)", got, reloadsBefore)
		}
	})
}
