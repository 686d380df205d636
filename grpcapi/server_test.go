package grpcapi_test

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// TestAPIKeys: with API keys on, a call needs a key of the ratelimit:gate
// scope, as the HTTP gate does, and a refused call counts nothing.
func TestAPIKeys(t *testing.T) {
	e := newEnv(t, exampleConfig, options{keys: keySet(t, map[string]string{"gate-key": "ratelimit:gate", "check-key": "ratelimit:check"})})
	req := &pb.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*rlv3.RateLimitDescriptor{desc("database", "users")}}
	for _, tc := range []struct {
		secret string
		want   codes.Code
	}{{"", codes.Unauthenticated}, {"wrong", codes.Unauthenticated}, {"check-key", codes.PermissionDenied}, {"gate-key", codes.OK}} {
		_, err := e.ask(t, tc.secret, req)
		if status.Code(err) != tc.want {
			t.Errorf("key %q: %v, want %s", tc.secret, err, tc.want)
		}
	}
	if n := len(e.m.Keys()); n != 1 {
		t.Errorf("%d Redis keys after one allowed call, want 1: %v", n, e.m.Keys())
	}
	for _, k := range e.m.Keys() {
		if !strings.Contains(k, ":t:acme:rl:") {
			t.Errorf("key %q is not in the tenant's namespace", k)
		}
	}
}

// TestHealthAndReflection: grpc.health.v1 answers SERVING for the server
// and for the rate-limit service; reflection lists the service.
func TestHealthAndReflection(t *testing.T) {
	e := newEnv(t, exampleConfig, options{})
	h := healthpb.NewHealthClient(e.conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		r, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, r, err)
		}
	}
	st, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, s := range r.GetListServicesResponse().GetService() {
		found = found || s.Name == "envoy.service.ratelimit.v3.RateLimitService"
	}
	if !found {
		t.Errorf("reflection lists %v", r.GetListServicesResponse().GetService())
	}
}
