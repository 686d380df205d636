package grpcapi_test

import (
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// envoyIntegrationConfigs are the domains of envoyproxy/ratelimit's
// integration tests (test/integration/runtime/current/ratelimit/config:
// basic, another, basic_headers, sanitize, share_threshold), loaded
// together as its runtime directory is.
var envoyIntegrationConfigs = map[string]string{
	"basic.yaml": `domain: basic
descriptors:
  - {key: key1, rate_limit: {unit: second, requests_per_unit: 50}}
  - {key: key1_local, rate_limit: {unit: second, requests_per_unit: 50}}
  - {key: one_per_minute, rate_limit: {unit: minute, requests_per_unit: 1}}
`,
	"another.yaml": `domain: another
descriptors:
  - {key: key2, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: key3, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: key2_local, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: key3_local, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: key4, rate_limit: {unit: day, requests_per_unit: 20}}
  - {key: key4_local, rate_limit: {unit: day, requests_per_unit: 20}}
`,
	"basic_headers.yaml": `domain: basic_headers
descriptors:
  - {key: key1, rate_limit: {unit: second, requests_per_unit: 50}}
`,
	"sanitize.yaml": `domain: sanitize
descriptors:
  - {key: grpc_path, value_to_metric: true, rate_limit: {unit: minute, requests_per_unit: 50}}
  - {key: detailed_path, detailed_metric: true, rate_limit: {unit: minute, requests_per_unit: 50}}
`,
	"share_threshold.yaml": `domain: share-threshold-test
descriptors:
  - {key: files, value: files/*, share_threshold: true, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: files_no_share, value: files_no_share/*, rate_limit: {unit: hour, requests_per_unit: 10}}
`,
}

// TestEnvoyIntegrationConfigs decides the requests of envoyproxy/ratelimit's
// integration tests (test/integration/integration_test.go) under its
// configurations, at a fixed moment inside every window: each request
// sequence is allowed exactly `allowed` times, then OVER_LIMIT. Where a
// request carries several descriptors, a denial counts nothing in any of
// them (Latchkey's rule; envoyproxy/ratelimit counts the others).
func TestEnvoyIntegrationConfigs(t *testing.T) {
	c := &clock{at}
	e := newEnv(t, envoyIntegrationConfigs, options{now: c.now})
	cases := []struct {
		name    string
		domain  string
		reqs    [][]*rlv3.RateLimitDescriptor // sent in turn, round and round
		allowed int                           // OK answers before the first OVER_LIMIT; -1: never over
	}{
		{"basic key1: 50 per second", "basic", [][]*rlv3.RateLimitDescriptor{{desc("key1", "foo")}}, 50},
		{"basic key1 another value: its own counter", "basic", [][]*rlv3.RateLimitDescriptor{{desc("key1", "bar")}}, 50},
		{"basic one_per_minute", "basic", [][]*rlv3.RateLimitDescriptor{{desc("one_per_minute", "foo")}}, 1},
		{"basic unknown key: no limit", "basic", [][]*rlv3.RateLimitDescriptor{{desc("nope", "foo")}}, -1},
		{"another key2: 20 per minute", "another", [][]*rlv3.RateLimitDescriptor{{desc("key2", "value2")}}, 20},
		{"another key2 and key3: key3's 10 per hour binds", "another",
			[][]*rlv3.RateLimitDescriptor{{desc("key2", "value3"), desc("key3", "value3")}}, 10},
		{"another key4: 20 per day", "another", [][]*rlv3.RateLimitDescriptor{{desc("key4", "v")}}, 20},
		{"basic_headers key1", "basic_headers", [][]*rlv3.RateLimitDescriptor{{desc("key1", "foo")}}, 50},
		{"sanitize grpc_path", "sanitize", [][]*rlv3.RateLimitDescriptor{{desc("grpc_path", "/service/method")}}, 50},
		{"share_threshold: every files/* value on one counter", "share-threshold-test", [][]*rlv3.RateLimitDescriptor{
			{desc("files", "files/a.pdf")}, {desc("files", "files/b.csv")}, {desc("files", "files/c.txt")}}, 10},
		{"no share_threshold: each files_no_share/* value its own", "share-threshold-test", [][]*rlv3.RateLimitDescriptor{
			{desc("files_no_share", "files_no_share/a.pdf")}, {desc("files_no_share", "files_no_share/b.csv")}}, 20},
		{"an unknown domain: OK", "unknown", [][]*rlv3.RateLimitDescriptor{{desc("key1", "foo")}}, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.allowed + 1
			if tc.allowed < 0 {
				n = 60
			}
			got := 0
			for i := range n {
				r := e.must(t, &pb.RateLimitRequest{Domain: tc.domain, Descriptors: tc.reqs[i%len(tc.reqs)]})
				if r.OverallCode != ok {
					break
				}
				got++
			}
			want := tc.allowed
			if want < 0 {
				want = n
			}
			if got != want {
				t.Fatalf("%d allowed before OVER_LIMIT, want %d", got, want)
			}
		})
	}
}
