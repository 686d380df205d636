package integration

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/latchkey/latchkey/internal/testca"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestEnvoyGRPCExactAcrossInstances: 3 server processes on one Redis, 32
// gRPC clients each, ShouldRateLimit on one domain rule (an epoch-aligned
// fixed window), on a calendar month in Berlin (by Redis TIME) and on one
// rule naming a policy of the policies file: each
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
  - {key: account, rate_limit: {unit: month, calendar: month, timezone: Europe/Berlin, requests_per_unit: 100}}
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
	if got := run("account", "acme", 2); got != 100 {
		t.Errorf("calendar month: %d allowed over 192 calls, want exactly 100", got)
	}
	e := remoteEnv(t, servers[1].URL)
	r := e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"shared","key":"alice"}`)
	wantStatus(t, r, 429)
	r = e.do(t, "POST", "/v1/ratelimit/check", `{"policy":"shared","key":"bob"}`)
	wantStatus(t, r, 200)
}

// TestEnvoyGRPCOverTLSWithKeys: a server process with TLS and an API keys
// file serves gRPC on the HTTP port's certificate and keys: a key with the
// ratelimit:gate scope is decided, a key without it is refused
// (PermissionDenied), no key is Unauthenticated, and a client that does
// not speak TLS gets no answer; all before anything is counted.
func TestEnvoyGRPCOverTLSWithKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, body []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, body, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca := testca.New(t)
	cert, key := ca.Issue(t, "server", true)
	envoy := write("envoy.yaml", []byte("domain: gw\ndescriptors:\n  - {key: tenant, rate_limit: {unit: year, requests_per_unit: 1}}\n"))
	gport := freePort(t)
	startTLSServerProcess(t, buildServer(t), dir, freePort(t), ca.Pool(),
		"LATCHKEY_TLS_CERT="+write("cert.pem", cert), "LATCHKEY_TLS_KEY="+write("key.pem", key),
		"LATCHKEY_API_KEYS="+writeKeysFile(t, tenantsFile("")), "LATCHKEY_ENVOY_CONFIG="+envoy, "LATCHKEY_GRPC_ADDR=127.0.0.1:"+gport)

	dial := func(creds credentials.TransportCredentials) pb.RateLimitServiceClient {
		conn, err := grpc.NewClient("127.0.0.1:"+gport, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return pb.NewRateLimitServiceClient(conn)
	}
	req := &pb.RateLimitRequest{Domain: "gw", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}}}}
	ask := func(c pb.RateLimitServiceClient, secret string) (*pb.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if secret != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+secret)
		}
		return c.ShouldRateLimit(ctx, req)
	}
	overTLS := dial(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool()}))
	for _, tc := range []struct {
		name   string
		client pb.RateLimitServiceClient
		secret string
		want   codes.Code
	}{
		{"no key", overTLS, "", codes.Unauthenticated},
		{"a key without ratelimit:gate", overTLS, secretAdminA, codes.PermissionDenied},
		{"an unknown key", overTLS, "not-a-key-0123456789", codes.Unauthenticated},
		{"plaintext to the TLS port", dial(insecure.NewCredentials()), secretA, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ask(tc.client, tc.secret); status.Code(err) != tc.want {
				t.Errorf("ShouldRateLimit = %v, want %s", err, tc.want)
			}
		})
	}
	// The one request the year allows is still there: the refusals counted nothing.
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		r, err := ask(overTLS, secretA)
		if err != nil || r.OverallCode != want {
			t.Fatalf("call %d with the gate key: %v %v, want %s", i+1, r, err, want)
		}
	}
}
