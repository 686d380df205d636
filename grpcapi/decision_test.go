package grpcapi_test

import (
	"strconv"
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

// clock is a settable server clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// at is 2026-03-15 10:20:30.250 UTC: inside every unit's window, none of
// whose ends it is.
var at = time.Date(2026, 3, 15, 10, 20, 30, 250e6, time.UTC)

// TestEveryUnit checks each unit's current_limit, that its window is on the
// epoch as envoyproxy/ratelimit's src/utils/utilities.go computes it
// (UnitToDivider: week, month and year fixed lengths; CalculateReset:
// divider - now%divider) and that its counter lives until that window ends,
// not a moment longer; the headers are rateLimitLimitHeader's and
// rateLimitResetHeader's of src/service/ratelimit.go.
func TestEveryUnit(t *testing.T) {
	units := map[string]int64{"second": 1, "minute": 60, "hour": 3600, "day": 86400,
		"week": 7 * 86400, "month": 30 * 86400, "year": 365 * 86400}
	for unit, divider := range units {
		t.Run(unit, func(t *testing.T) {
			c := &clock{at}
			e := newEnv(t, map[string]string{"u.yaml": "domain: u\ndescriptors:\n  - key: k\n    rate_limit: {unit: " + unit + ", requests_per_unit: 1}\n"},
				options{headers: true, now: c.now})
			r := e.must(t, &pb.RateLimitRequest{Domain: "u", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}})
			st := r.Statuses[0]
			if st.CurrentLimit.GetUnit().String() != strings.ToUpper(unit) || st.CurrentLimit.RequestsPerUnit != 1 || st.LimitRemaining != 0 {
				t.Fatalf("status %v", st)
			}
			now := at.Unix()
			reset := divider - now%divider // CalculateReset
			if d := st.DurationUntilReset.AsDuration(); d != time.Duration(reset)*time.Second {
				t.Errorf("duration_until_reset %s, want %ds", d, reset)
			}
			end := time.Unix((now/divider+1)*divider, 0)
			keys := e.m.Keys()
			if len(keys) != 1 {
				t.Fatalf("keys %v, want one counter", keys)
			}
			if ttl := e.m.TTL(keys[0]); ttl != end.Sub(at) {
				t.Errorf("counter TTL %s, want %s (until the window's end at %s)", ttl, end.Sub(at), end)
			}
			want := []string{"1", "0", strconv.FormatInt(reset, 10)}
			if len(r.ResponseHeadersToAdd) != 3 {
				t.Fatalf("headers %v", r.ResponseHeadersToAdd)
			}
			for i, h := range r.ResponseHeadersToAdd {
				if h.Key != []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}[i] || h.Value != want[i] {
					t.Errorf("header %d: %s: %s, want %s", i, h.Key, h.Value, want[i])
				}
			}
			if r := e.must(t, &pb.RateLimitRequest{Domain: "u", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}}); r.OverallCode != over {
				t.Errorf("second request: %v, want OVER_LIMIT", r.OverallCode)
			}
		})
	}
}

// TestWindowsOnTheEpoch: a window starts at a multiple of its length since
// the epoch, not at its first request (src/limiter/cache_key.go
// GenerateCacheKey keys the counter by (now/divider)*divider): a limit used
// up in the last 100ms of a minute is back at the minute's turn, though
// the first window's counter is still in Redis, and each window has its
// own counter.
func TestWindowsOnTheEpoch(t *testing.T) {
	c := &clock{time.Date(2026, 3, 15, 10, 20, 59, 900e6, time.UTC)}
	e := newEnv(t, map[string]string{"m.yaml": "domain: m\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"},
		options{now: c.now})
	req := &pb.RateLimitRequest{Domain: "m", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}}
	codes := func() []pb.RateLimitResponse_Code {
		var out []pb.RateLimitResponse_Code
		for range 3 {
			out = append(out, e.must(t, req).OverallCode)
		}
		return out
	}
	want := []pb.RateLimitResponse_Code{ok, ok, over}
	if got := codes(); !equalCodes(got, want) {
		t.Fatalf("10:20:59.900: %v, want %v", got, want)
	}
	c.t = time.Date(2026, 3, 15, 10, 21, 0, 0, time.UTC) // miniredis's TTLs stand still: the old counter stays
	if got := codes(); !equalCodes(got, want) {
		t.Fatalf("10:21:00: %v, want %v", got, want)
	}
	keys := e.m.Keys()
	if len(keys) != 2 {
		t.Fatalf("keys %v, want one counter per window", keys)
	}
	for _, k := range keys {
		if e.m.TTL(k) != 100*time.Millisecond && e.m.TTL(k) != time.Minute {
			t.Errorf("%s TTL %s, want 100ms (the first window's rest) or 1m", k, e.m.TTL(k))
		}
	}
}

// TestShareThresholdOnAnInnerWildcard: share_threshold on a wildcard
// without a rate_limit of its own shares the counter of the rule below it
// (config_impl.go GetLimit tracks the pattern at any level:
// shareThresholdPatterns).
func TestShareThresholdOnAnInnerWildcard(t *testing.T) {
	e := newEnv(t, map[string]string{"s.yaml": `domain: s
descriptors:
  - key: path
    value: /files/*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2}
`}, options{})
	var got []pb.RateLimitResponse_Code
	for _, p := range []string{"/files/a", "/files/b", "/files/c"} {
		got = append(got, e.must(t, &pb.RateLimitRequest{Domain: "s", Descriptors: []*rlv3.RateLimitDescriptor{desc("path", p, "user", "u1")}}).OverallCode)
	}
	if want := []pb.RateLimitResponse_Code{ok, ok, over}; !equalCodes(got, want) {
		t.Fatalf("%v, want %v (one counter for every /files/ path)", got, want)
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

// TestCalendarMonthOverGRPC: calendar: month under rate_limit makes the
// unit a month of the calendar in timezone, where envoyproxy/ratelimit's
// month is 30 days on the epoch: the count starts afresh at 00:00 on the
// 1st in that zone, by the Redis clock, and the status's unit is MONTH
// with the time to the month's end.
func TestCalendarMonthOverGRPC(t *testing.T) {
	e := newEnv(t, map[string]string{"q.yaml": `
domain: quota
descriptors:
  - key: account
    rate_limit: {unit: month, calendar: month, timezone: America/New_York, requests_per_unit: 2}
`}, options{})
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	e.m.SetTime(time.Date(2026, 10, 31, 23, 59, 58, 0, ny))
	req := &pb.RateLimitRequest{Domain: "quota", Descriptors: []*rlv3.RateLimitDescriptor{desc("account", "a1")}}
	var got []pb.RateLimitResponse_Code
	for range 3 {
		got = append(got, e.must(t, req).OverallCode)
	}
	if want := []pb.RateLimitResponse_Code{ok, ok, over}; !equalCodes(got, want) {
		t.Fatalf("on October 31st: %v, want %v", got, want)
	}
	resp := e.must(t, req)
	st := resp.Statuses[0]
	if st.CurrentLimit.Unit != pb.RateLimitResponse_RateLimit_MONTH || st.DurationUntilReset.AsDuration() != 2*time.Second {
		t.Errorf("status %v, want unit MONTH and 2s to the month's end", st)
	}
	e.m.SetTime(time.Date(2026, 11, 1, 0, 0, 0, 0, ny))
	if resp := e.must(t, req); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 1 {
		t.Errorf("on November 1st: %v, want a fresh month with 1 left", resp)
	}
}
