package grpcapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/latchkey/latchkey/grpcapi"
	"github.com/latchkey/latchkey/service/auth"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// env is a gRPC server on miniredis and a client of it.
type env struct {
	reloader *grpcapi.Reloader // with options.reload
	m        *miniredis.Miniredis
	svc      *ratelimit.Service
	client   pb.RateLimitServiceClient
	conn     *grpc.ClientConn
}

// options of newEnv.
type options struct {
	keys     *auth.KeySet
	headers  bool
	policies []ratelimit.Policy
	now      func() time.Time // the server's clock; default time.Now
	// reload, when set, is the configuration file the server reloads
	// (env.reloader), instead of files.
	reload string
}

// newEnv serves the envoy configuration files on a fresh miniredis.
func newEnv(t *testing.T, files map[string]string, o options) *env {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(rdb, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := ratelimit.New(st, ratelimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	if o.policies != nil {
		if _, _, err := svc.SetPolicies(o.policies); err != nil {
			t.Fatal(err)
		}
	}
	srcs := map[string][]byte{}
	for n, s := range files {
		srcs[n] = []byte(s)
	}
	conf, err := grpcapi.ParseConfig(srcs, svc.ValidateLimit)
	if err != nil {
		t.Fatal(err)
	}
	current := func() *grpcapi.EnvoyConfig { return conf }
	var reloader *grpcapi.Reloader
	if o.reload != "" {
		if reloader, err = grpcapi.NewReloader(o.reload, svc.ValidateLimit, nil, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		current = reloader.Current
	}
	cfg := grpcapi.Config{ResponseHeaders: o.headers, Now: o.now}
	if o.keys != nil {
		cfg.Keys = func() *auth.KeySet { return o.keys }
	}
	s := grpcapi.New(svc, current, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { s.GracefulStop(context.Background()) })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &env{reloader: reloader, m: m, svc: svc, client: pb.NewRateLimitServiceClient(conn), conn: conn}
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask sends one ShouldRateLimit call, with secret as its bearer key when set.
func (e *env) ask(t *testing.T, secret string, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if secret != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+secret)
	}
	return e.client.ShouldRateLimit(ctx, req)
}

// must is ask for a call that must succeed.
func (e *env) must(t *testing.T, req *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	resp, err := e.ask(t, "", req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// keySet is a key set of one tenant's keys: secret to scopes.
func keySet(t *testing.T, keys map[string]string) *auth.KeySet {
	t.Helper()
	y := "tenants:\n  acme:\n    keys:\n"
	for secret, scope := range keys {
		sum := sha256.Sum256([]byte(secret))
		y += "      - {id: " + secret + ", sha256: " + hex.EncodeToString(sum[:]) + ", scopes: [" + scope + "]}\n"
	}
	ks, err := auth.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return ks
}
