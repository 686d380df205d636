package grpcapi_test

import (
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/latchkey/latchkey/service/ratelimit"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)

// codes returns the overall code and each descriptor's.
func codesOf(r *pb.RateLimitResponse) []pb.RateLimitResponse_Code {
	out := []pb.RateLimitResponse_Code{r.OverallCode}
	for _, s := range r.Statuses {
		out = append(out, s.Code)
	}
	return out
}

// exampleConfig is envoyproxy/ratelimit's README "Example 1" to "Example 4"
// and its test/integration/runtime/current/ratelimit/config/basic.yaml,
// in one file per domain.
var exampleConfig = map[string]string{
	// README "Example 1": a key-only descriptor and a key_value one.
	"mongo.yaml": `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: database
    value: default
    rate_limit: {unit: second, requests_per_unit: 2}
`,
	// README "Example 2" and "Example 3": nested keys, a key with any value.
	"edge.yaml": `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: to_cluster
    value: mongo
    descriptors:
      - key: from_cluster
        value: app
        rate_limit: {unit: minute, requests_per_unit: 2}
`,
	// README "Wildcard", "Sharing thresholds for wildcard matches",
	// "Example 6" (unlimited), "Example 7" (shadow_mode), "Example 8"
	// (replaces).
	"features.yaml": `
domain: features
descriptors:
  - key: path
    value: /foo/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: shared
    value: /bar/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: internal
    rate_limit: {unlimited: true}
  - key: dry
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tier
    value: generic
    rate_limit: {name: generic, unit: minute, requests_per_unit: 1}
  - key: tier
    value: premium
    rate_limit: {unit: minute, requests_per_unit: 3, replaces: [{name: generic}]}
  - key: cost
    rate_limit: {unit: minute, requests_per_unit: 5}
`,
}

// TestShouldRateLimitAsEnvoyproxyRatelimit sends each case's requests in
// turn and checks the overall and per-descriptor codes of each.
func TestShouldRateLimitAsEnvoyproxyRatelimit(t *testing.T) {
	type step struct {
		req  *pb.RateLimitRequest
		want []pb.RateLimitResponse_Code // overall, then each descriptor
	}
	req := func(domain string, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitRequest {
		return &pb.RateLimitRequest{Domain: domain, Descriptors: ds}
	}
	rep := func(n int, s step) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	cases := []struct {
		name  string
		steps []step
	}{
		// README "Example 1": database=users allows 3 a second.
		{"key_value", append(rep(3, step{req("mongo_cps", desc("database", "users")), []pb.RateLimitResponse_Code{ok, ok}}),
			step{req("mongo_cps", desc("database", "users")), []pb.RateLimitResponse_Code{over, over}})},
		// README "Example 1": a value no descriptor names matches nothing: OK.
		{"unmatched value", rep(4, step{req("mongo_cps", desc("database", "other")), []pb.RateLimitResponse_Code{ok, ok}})},
		// README "Example 3": the key_value entry comes before the key alone
		// (config_impl.go GetLimit), and each address has its own counter.
		{"most specific first", append(append(rep(4, step{req("edge_proxy_per_ip", desc("remote_address", "50.0.0.5")), []pb.RateLimitResponse_Code{ok, ok}}),
			step{req("edge_proxy_per_ip", desc("remote_address", "50.0.0.5")), []pb.RateLimitResponse_Code{over, over}}),
			rep(2, step{req("edge_proxy_per_ip", desc("remote_address", "10.0.0.1")), []pb.RateLimitResponse_Code{ok, ok}})...)},
		// README "Example 2": nested descriptors; a shallower request matches nothing.
		{"nested", append(rep(2, step{req("edge_proxy_per_ip", desc("to_cluster", "mongo", "from_cluster", "app")), []pb.RateLimitResponse_Code{ok, ok}}),
			step{req("edge_proxy_per_ip", desc("to_cluster", "mongo", "from_cluster", "app")), []pb.RateLimitResponse_Code{over, over}},
			step{req("edge_proxy_per_ip", desc("to_cluster", "mongo")), []pb.RateLimitResponse_Code{ok, ok}})},
		// README "Wildcard": each value the wildcard matches has its own counter.
		{"wildcard", append(rep(2, step{req("features", desc("path", "/foo/a")), []pb.RateLimitResponse_Code{ok, ok}}),
			step{req("features", desc("path", "/foo/a")), []pb.RateLimitResponse_Code{over, over}},
			step{req("features", desc("path", "/foo/b")), []pb.RateLimitResponse_Code{ok, ok}})},
		// README "Sharing thresholds for wildcard matches": one counter.
		{"share_threshold", []step{
			{req("features", desc("shared", "/bar/a")), []pb.RateLimitResponse_Code{ok, ok}},
			{req("features", desc("shared", "/bar/b")), []pb.RateLimitResponse_Code{ok, ok}},
			{req("features", desc("shared", "/bar/c")), []pb.RateLimitResponse_Code{over, over}}}},
		// README "Example 6": unlimited never limits.
		{"unlimited", rep(5, step{req("features", desc("internal", "x")), []pb.RateLimitResponse_Code{ok, ok}})},
		// README "Example 7": shadow_mode answers OK even over the limit.
		{"shadow_mode", rep(3, step{req("features", desc("dry", "x")), []pb.RateLimitResponse_Code{ok, ok}})},
		// README "Example 8": premium replaces generic when both match.
		{"replaces", rep(3, step{req("features", desc("tier", "generic"), desc("tier", "premium")), []pb.RateLimitResponse_Code{ok, ok, ok}})},
		// An unknown domain is OK for every descriptor (config_impl.go GetLimit).
		{"unknown domain", rep(3, step{req("nowhere", desc("a", "b"), desc("c", "d")), []pb.RateLimitResponse_Code{ok, ok, ok}})},
		// service/ratelimit.go: OVER_LIMIT overall if any descriptor is over,
		// and here nothing is counted then: the users counter stays at 2.
		{"any over is over, and consumes nothing", []step{
			{req("mongo_cps", desc("database", "default")), []pb.RateLimitResponse_Code{ok, ok}},
			{req("mongo_cps", desc("database", "default")), []pb.RateLimitResponse_Code{ok, ok}},
			{req("mongo_cps", desc("database", "users"), desc("database", "default")), []pb.RateLimitResponse_Code{over, ok, over}},
			{req("mongo_cps", desc("database", "users")), []pb.RateLimitResponse_Code{ok, ok}},
			{req("mongo_cps", desc("database", "users")), []pb.RateLimitResponse_Code{ok, ok}},
			{req("mongo_cps", desc("database", "users")), []pb.RateLimitResponse_Code{ok, ok}},
			{req("mongo_cps", desc("database", "users")), []pb.RateLimitResponse_Code{over, over}}}},
		// utilities.go GetHitsAddends: the request's hits_addend is the cost
		// of each descriptor, a descriptor's own one takes precedence.
		{"hits_addend", []step{
			{&pb.RateLimitRequest{Domain: "features", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{desc("cost", "k")}}, []pb.RateLimitResponse_Code{ok, ok}},
			{&pb.RateLimitRequest{Domain: "features", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{desc("cost", "k")}}, []pb.RateLimitResponse_Code{over, over}},
			{&pb.RateLimitRequest{Domain: "features", HitsAddend: 3, Descriptors: []*rlv3.RateLimitDescriptor{{Entries: desc("cost", "k").Entries, HitsAddend: wrapperspb.UInt64(2)}}}, []pb.RateLimitResponse_Code{ok, ok}},
			{&pb.RateLimitRequest{Domain: "features", Descriptors: []*rlv3.RateLimitDescriptor{desc("cost", "k")}}, []pb.RateLimitResponse_Code{over, over}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, exampleConfig, options{})
			for i, s := range tc.steps {
				got := codesOf(e.must(t, s.req))
				if !equalCodes(got, s.want) {
					t.Fatalf("request %d: codes %v, want %v", i, got, s.want)
				}
			}
		})
	}
}

func equalCodes(a, b []pb.RateLimitResponse_Code) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestEveryUnit checks each unit's current_limit and that its counter
// lives for the unit's length as utilities.go UnitToDivider computes it.
func TestEveryUnit(t *testing.T) {
	units := map[string]time.Duration{"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
		"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour}
	for unit, window := range units {
		t.Run(unit, func(t *testing.T) {
			e := newEnv(t, map[string]string{"u.yaml": "domain: u\ndescriptors:\n  - key: k\n    rate_limit: {unit: " + unit + ", requests_per_unit: 1}\n"}, options{headers: true})
			r := e.must(t, &pb.RateLimitRequest{Domain: "u", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}})
			st := r.Statuses[0]
			if st.CurrentLimit.GetUnit().String() != strings.ToUpper(unit) || st.CurrentLimit.RequestsPerUnit != 1 || st.LimitRemaining != 0 {
				t.Fatalf("status %v", st)
			}
			if d := st.DurationUntilReset.AsDuration(); d != window {
				t.Errorf("duration_until_reset %s, want %s", d, window)
			}
			var ttl time.Duration
			for _, k := range e.m.Keys() {
				ttl = e.m.TTL(k)
			}
			if ttl != window {
				t.Errorf("counter TTL %s, want %s", ttl, window)
			}
			if len(r.ResponseHeadersToAdd) != 3 || r.ResponseHeadersToAdd[1].Value != "0" {
				t.Errorf("headers %v", r.ResponseHeadersToAdd)
			}
			if r := e.must(t, &pb.RateLimitRequest{Domain: "u", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}}); r.OverallCode != over {
				t.Errorf("second request: %v, want OVER_LIMIT", r.OverallCode)
			}
		})
	}
}

// TestSharedCounterWithHTTPPolicy: a rule naming a policy of the policies
// file decides under it, with the descriptor's value as the key, so
// POST /v1/ratelimit/check {policy, key} (ratelimit.Service.Check) counts
// against the same counter.
func TestSharedCounterWithHTTPPolicy(t *testing.T) {
	pol := ratelimit.Policy{Name: "per-user", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 3, Window: time.Minute},
		Key: "ip", DenyStatus: 429, Fail: ratelimit.FailOpen}
	e := newEnv(t, map[string]string{"s.yaml": "domain: s\ndescriptors:\n  - key: user\n    rate_limit: {policy: per-user}\n"},
		options{policies: []ratelimit.Policy{pol}})
	req := &pb.RateLimitRequest{Domain: "s", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "alice")}}
	for i := range 2 {
		if r := e.must(t, req); r.OverallCode != ok {
			t.Fatalf("gRPC %d: %v", i, r.OverallCode)
		}
	}
	d, err := e.svc.Check(t.Context(), ratelimit.Request{Policy: "per-user", Key: "alice"})
	if err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("HTTP check: %+v %v, want allowed with 0 remaining", d, err)
	}
	if r := e.must(t, req); r.OverallCode != over {
		t.Fatalf("gRPC after the HTTP check: %v, want OVER_LIMIT", r.OverallCode)
	}
}
