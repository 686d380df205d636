package integration

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestEnvoyGRPCExactAcrossInstances: 3 server processes on one Redis, 32
// gRPC clients each, ShouldRateLimit on one domain rule (an epoch-aligned
// fixed window) and on one rule naming a policy of the policies file: each
// limit allows exactly its count in all, and the policy's counter is the
// one POST /v1/ratelimit/check decides on, over HTTP.
func TestEnvoyGRPCExactAcrossInstances(t *testing.T) {
	_, url := newRedis(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	policies := write("policies.yaml", "policies:\n  shared:\n    limit: 100\n    window: 1h\n")
	envoy := write("envoy.yaml", `domain: gw
descriptors:
  - {key: tenant, rate_limit: {unit: year, requests_per_unit: 100}}
  - {key: user, rate_limit: {policy: shared}}
`)
	prefix := uniquePrefix()
	bin := buildServer(t)
	var servers []*serverProcess
	var clients []pb.RateLimitServiceClient
	for range 3 {
		gport := freePort(t)
		srv := startServerProcess(t, bin, dir, freePort(t), "LATCHKEY_REDIS_URL="+url, "LATCHKEY_KEY_PREFIX="+prefix,
			"LATCHKEY_RATELIMIT_POLICIES="+policies, "LATCHKEY_ENVOY_CONFIG="+envoy, "LATCHKEY_GRPC_ADDR=127.0.0.1:"+gport)
		servers = append(servers, srv)
		conn, err := grpc.NewClient("127.0.0.1:"+gport, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		clients = append(clients, pb.NewRateLimitServiceClient(conn))
	}
	run := func(key, value string, attempts int) (allowed int64) {
		var n atomic.Int64
		var wg sync.WaitGroup
		for _, c := range clients {
			for range 32 {
				wg.Go(func() {
					for range attempts {
						r, err := c.ShouldRateLimit(t.Context(), &pb.RateLimitRequest{Domain: "gw",
							Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}},
							grpc.WaitForReady(true))
						if err != nil {
							t.Error(err)
							return
						}
						if r.OverallCode == pb.RateLimitResponse_OK {
							n.Add(1)
						}
					}
				})
			}
		}
		wg.Wait()
		return n.Load()
	}
	if got := run("tenant", "acme", 2); got != 100 {
		t.Errorf("domain rule: %d allowed over 192 calls, want exactly 100", got)
	}
	if got := run("user", "alice", 2); got != 100 {
		t.Errorf("policy rule: %d allowed over 192 calls, want exactly 100", got)
	}
	e := remoteEnv(t, servers[1].URL)
	r := e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"shared","key":"alice"}`)
	wantStatus(t, r, 429)
	r = e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"shared","key":"bob"}`)
	wantStatus(t, r, 200)
}
