package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// stack is a Latchkey server, and the redis-server it uses unless it runs on
// a cluster, started for one run.
type stack struct {
	url      string
	grpcAddr string // the server's gRPC port, serving benchEnvoyConfig
	redisURL string // the single node's URL; empty on a cluster
	stop     func()
}

// freePort returns a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startStack starts redis-server (no persistence) and Latchkey on free
// loopback ports, configured with the policies and the envoy configuration
// (on its gRPC port) the scenarios use. Given a
// Redis Cluster's seed URL it starts no redis-server and points Latchkey at
// the cluster instead.
func startStack(ctx context.Context, serverBin, redisBin, clusterURL string) (*stack, error) {
	dir, err := os.MkdirTemp("", "latchbench-")
	if err != nil {
		return nil, err
	}
	var cleanups []func()
	stop := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		_ = os.RemoveAll(dir)
	}
	fail := func(err error) (*stack, error) { stop(); return nil, err }

	if serverBin == "" {
		serverBin = filepath.Join(dir, "latchkey")
		build := exec.CommandContext(ctx, "go", "build", "-o", serverBin, "./cmd/server")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fail(fmt.Errorf("build server (run latchbench from the repository root): %w", err))
		}
	}
	redisURL, redisEnv := "", []string{"LATCHKEY_REDIS_URL=" + clusterURL, "LATCHKEY_REDIS_CLUSTER=true"}
	if clusterURL == "" {
		redisPort, err := freePort()
		if err != nil {
			return fail(err)
		}
		redis := exec.Command(redisBin, "--port", fmt.Sprint(redisPort), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir)
		if err := redis.Start(); err != nil {
			return fail(fmt.Errorf("start %s: %w", redisBin, err))
		}
		cleanups = append(cleanups, func() { _ = redis.Process.Kill(); _ = redis.Wait() })
		redisURL = fmt.Sprintf("redis://127.0.0.1:%d/0", redisPort)
		redisEnv = []string{"LATCHKEY_REDIS_URL=" + redisURL}
	}

	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	policies := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(policies, []byte(benchPolicies), 0o644); err != nil {
		return fail(err)
	}
	envoy := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(envoy, []byte(benchEnvoyConfig), 0o644); err != nil {
		return fail(err)
	}
	grpcPort, err := freePort()
	if err != nil {
		return fail(err)
	}
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", grpcPort)
	env := append(append(os.Environ(), redisEnv...), stackEnv(policies, port)...)
	env = append(env, "LATCHKEY_ENVOY_CONFIG="+envoy, "LATCHKEY_GRPC_ADDR="+grpcAddr)
	srv := exec.Command(serverBin)
	srv.Env = env
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return fail(err)
	}
	srv.Stdout, srv.Stderr = logFile, logFile
	if err := srv.Start(); err != nil {
		return fail(fmt.Errorf("start server: %w", err))
	}
	cleanups = append(cleanups, func() {
		_ = srv.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = srv.Process.Kill()
			<-done
		}
		_ = logFile.Close()
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitReady(ctx, url); err != nil {
		tail, _ := os.ReadFile(logFile.Name())
		return fail(fmt.Errorf("%w; server log:\n%s", err, lastLines(string(tail), 20)))
	}
	return &stack{url: url, grpcAddr: grpcAddr, redisURL: redisURL, stop: stop}, nil
}

// benchPolicies holds high-limit policies, so the scenarios measure the
// decision path rather than denials: "bench" (gate and check), "bench1"
// and "bench3" (one and three limits in the limits: form), "leased" (a
// global limit with a lease), "leased-ip" (a per-client limit with a
// lease, on the gate's 10,000 client IPs) and "per-ip"
// (deploy/nginx/nginx.conf's).
const benchPolicies = `policies:
  bench:
    limit: 1000000000
    window: 1m
  bench1:
    limits:
      - {name: per-ip, key: ip, limit: 1000000000, window: 1m}
  bench3:
    limits:
      - {name: per-ip, key: ip, limit: 1000000000, window: 1m}
      - {name: per-key, key: "header:X-Api-Key", limit: 1000000000, window: 1m, algorithm: sliding_window}
      - {name: global, key: const, limit: 1000000000, window: 1m, algorithm: token_bucket}
  leased:
    limits:
      - {name: global, key: const, limit: 1000000000, window: 1m, lease: 1000}
  leased-ip:
    limits:
      - {name: per-ip, key: ip, limit: 1000000000, window: 1m, lease: 1000}
  per-ip:
    limit: 1000000000
    window: 10m
    deny_status: 403
`

// stackEnv configures the started server, Redis aside: a loopback
// listener, the bench policy, and the load generator (127.0.0.1) as a
// trusted proxy so the gate takes client IPs from X-Forwarded-For, and
// watch caps that let the watchers scenario's one client open 15,000
// streams. Request logs are at warn, for the ceiling and every scenario
// alike.
func stackEnv(policies string, port int) []string {
	return []string{
		fmt.Sprintf("LATCHKEY_ADDR=127.0.0.1:%d", port),
		"LATCHKEY_RATELIMIT_POLICIES=" + policies,
		"LATCHKEY_TRUSTED_PROXIES=127.0.0.1/32",
		"LATCHKEY_LOG_LEVEL=warn",
		"LATCHKEY_MAX_WAIT=60s",
		"LATCHKEY_WATCH_MAX_STREAMS=15000",
		"LATCHKEY_WATCH_MAX_STREAMS_PER_CLIENT=15000",
	}
}

func waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("server did not become ready within 30s")
}

func lastLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// machine describes where the run happened.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				_, v, _ := strings.Cut(line, ":")
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s/%s, %d cores, %s, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), model, runtime.Version())
}
