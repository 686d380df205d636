package grpcapi_test

import (
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestDeployEnvoyRatelimitConfig reads deploy/envoy/envoy-ratelimit.yaml as
// Envoy's bootstrap message (every field and typed config must exist in
// Envoy's protos, as Envoy itself checks) and checks that its ratelimit
// filter asks Latchkey's gRPC port.
func TestDeployEnvoyRatelimitConfig(t *testing.T) {
	b, err := os.ReadFile("../deploy/envoy/envoy-ratelimit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("invalid: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := bs.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var rl ratelimitv3.RateLimit
	if err := hcm.HttpFilters[0].GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatalf("first filter is not the ratelimit filter: %v", err)
	}
	if c := rl.RateLimitService.GrpcService.GetEnvoyGrpc().ClusterName; c != "latchkey_grpc" || rl.Domain != "edge" {
		t.Errorf("ratelimit filter asks cluster %q for domain %q", c, rl.Domain)
	}
	if p := bs.StaticResources.Clusters[0].LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().GetPortValue(); p != 8081 {
		t.Errorf("latchkey_grpc port %d, want the gRPC port 8081", p)
	}
}
