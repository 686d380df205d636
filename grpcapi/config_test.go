package grpcapi_test

import (
	"strings"
	"testing"

	"github.com/latchkey/latchkey/grpcapi"
)

// TestConfigRefusals: what envoyproxy/ratelimit's config_imp.go refuses
// is refused for the same reason, naming the file and the descriptor.
func TestConfigRefusals(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"missing domain", map[string]string{"a.yaml": "descriptors: []\n"}, "a.yaml: config file cannot have empty domain"},
		{"duplicate domain across files", map[string]string{"a.yaml": "domain: d\n", "b.yaml": "domain: d\n"}, "b.yaml: duplicate domain 'd' in config file"},
		{"duplicate descriptor", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, value: v}\n  - {key: k, value: v}\n"}, "duplicate descriptor composite key 'd.k_v'"},
		{"empty key", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {value: v}\n"}, "descriptor under 'd' has empty key"},
		{"unknown unit", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}\n"}, "descriptor 'd.k': invalid rate limit unit 'fortnight'"},
		{"unit beside unlimited", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, unlimited: true}}\n"}, "should not specify rate limit unit when unlimited"},
		{"replaces without name", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}}\n"}, "should not have an empty replaces entry"},
		{"replaces itself", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {name: n, unit: second, requests_per_unit: 1, replaces: [{name: n}]}}\n"}, "replaces should not contain name of same descriptor"},
		{"unknown field", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, limit: 3}\n"}, "a.yaml: "},
		{"share_threshold without wildcard", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, value: v, share_threshold: true, rate_limit: {unit: second, requests_per_unit: 1}}\n"}, "share_threshold can only be used with wildcard values (ending with '*'), but found key 'k_v'"},
		{"calendar beside another unit", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: day, calendar: month, requests_per_unit: 1}}\n"},
			"descriptor 'd.k': calendar month is the rule's window: give no window, and no unit but month"},
		{"calendar of a token bucket", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {calendar: month, algorithm: token_bucket, requests_per_unit: 1}}\n"},
			"calendar applies to the fixed_window algorithm only"},
		{"unknown time zone", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {calendar: month, timezone: Moon/Base, requests_per_unit: 1}}\n"},
			"timezone must be an IANA time zone name"},
		{"time zone without calendar", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: month, timezone: UTC, requests_per_unit: 1}}\n"},
			"descriptor 'd.k': timezone and week_start apply to calendar windows only"},
		{"window beyond a year", map[string]string{"a.yaml": "domain: d\ndescriptors:\n  - {key: k, rate_limit: {window: 9000h, requests_per_unit: 1}}\n"}, "window must be at most"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srcs := map[string][]byte{}
			for n, s := range tc.files {
				srcs[n] = []byte(s)
			}
			svc := newEnv(t, nil, options{}).svc
			_, err := grpcapi.ParseConfig(srcs, svc.ValidateLimit)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
