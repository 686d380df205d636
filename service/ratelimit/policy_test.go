package ratelimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/ratelimit"
)

func TestParsePolicies(t *testing.T) {
	yaml := `
policies:
  per-ip:
    limit: 3
    window: 10s
  api-key:
    limit: 100
    window: 1m
    algorithm: token_bucket
    burst: 20
    key: header:X-Api-Key
    deny_status: 403
    fail: closed
`
	json := `{"policies": {"per-ip": {"limit": 3, "window": "10s"},
	  "api-key": {"limit": 100, "window": "1m", "algorithm": "token_bucket", "burst": 20,
	              "key": "header:X-Api-Key", "deny_status": 403, "fail": "closed"}}}`
	want := []ratelimit.Policy{
		{Name: "api-key", Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 100, Window: time.Minute, Burst: 20},
			Key: "header:X-Api-Key", DenyStatus: 403, Fail: ratelimit.FailClosed},
		{Name: "per-ip", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 3, Window: 10 * time.Second},
			Key: "ip", DenyStatus: 429, Fail: ratelimit.FailOpen},
	}
	forEachPolicyFile(t, yaml, json, func(t *testing.T, got []ratelimit.Policy) {
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("policies (-want +got):\n%s", diff)
		}
	})
}

func TestParsePoliciesErrors(t *testing.T) {
	tests := []struct {
		name, src string
		isJSON    bool
		want      string
	}{
		{"empty", "", false, "no policies"},
		{"no map", "policies: {}", false, "no policies"},
		{"unknown field", "policies:\n  a:\n    limit: 3\n    window: 1s\n    rate: 5", false,
			`line 5: unknown field "rate" in policies.a: the fields there are key, limit, window, algorithm, burst, lease, shadow, calendar, timezone, week_start, deny_status, fail, cost, limits`},
		{"unknown JSON field", "{\"policies\":{\"a\":{\"limit\":3,\n\"window\":\"1s\",\n\"rate\":5}}}", true,
			`line 3: unknown field "rate" in policies.a: the fields there are key, limit, window, algorithm, burst, lease, shadow, calendar, timezone, week_start, deny_status, fail, cost, limits`},
		{"unknown limit field", "policies:\n  a:\n    limits: [{name: x, limit: 3, window: 1s, rate: 1}]", false,
			`line 3: unknown field "rate" in policies.a.limits[0]: the fields there are name, key, limit, window, algorithm, burst, lease, shadow`},
		{"unknown JSON limit field", `{"policies":{"a":{"limits":[{"name":"x","limit":3,"window":"1s","rate":1}]}}}`, true,
			`line 1: unknown field "rate" in policies.a.limits[0]: the fields there are name, key,`},
		{"missing window", "policies:\n  a:\n    limit: 3", false, `policy "a": window is required`},
		{"bad window", "policies:\n  a:\n    limit: 3\n    window: soon", false, `policy "a": window "soon" is not a duration`},
		// A value of the wrong kind is named by its path and line, with what
		// the field takes in words.
		{"limit not a number", "policies:\n  a:\n    limit: many\n    window: 1s", false, "line 3: policies.a.limit must be a whole number, got a string"},
		{"limit a fraction", "policies:\n  a:\n    limit: 1.5\n    window: 1s", false, "line 3: policies.a.limit must be a whole number, got a number"},
		{"JSON limit a fraction", `{"policies":{"a":{"limit":1.5,"window":"1s"}}}`, true, "line 1: policies.a.limit must be a whole number, got a JSON number"},
		{"JSON limit out of range", `{"policies":{"a":{"limit":99999999999999999999,"window":"1s"}}}`, true, "policies.a.limit must be a whole number, got a JSON number out of range"},
		{"policies as a list", "policies: [a]\n", false, "line 1: policies must be a map of policy names to policies, got a list"},
		{"JSON policies as a list", `{"policies":["a"]}`, true, "line 1: policies must be a map of policy names to policies, got a JSON array"},
		{"policy as a list", "policies:\n  a: [1]\n", false, "line 2: policies.a must be a map of the fields key, limit,"},
		{"limits as a map", "policies:\n  a:\n    limits: {a: 1}\n", false, "line 3: policies.a.limits must be a list of limits, got a map"},
		{"JSON limits as a map", `{"policies":{"a":{"limits":{"a":1}}}}`, true, "line 1: policies.a.limits must be a list of limits, got a JSON object"},
		{"limit's limit not a number", "policies:\n  a:\n    limits:\n      - {name: x, limit: many, window: 1s}\n", false,
			"line 4: policies.a.limits[0].limit must be a whole number, got a string"},
		{"JSON limit's limit not a number", `{"policies":{"a":{"limits":[{"name":"x","limit":"3"}]}}}`, true,
			"line 1: policies.a.limits[0].limit must be a whole number, got a JSON string"},
		{"shadow not a boolean", "policies:\n  a:\n    limit: 3\n    window: 1s\n    shadow: maybe\n", false, "line 5: policies.a.shadow must be true or false, got a string"},
		{"file as a list", "- a\n", false, "line 1: the top level must be a map of the fields policies, got a list"},
		{"JSON file as a list", `[]`, true, "line 1: the top level must be a map of the fields policies, got a JSON array"},
		{"bad JSON", `{"policies":`, true, "malformed JSON: the file ends too early"},
		// A field given twice is refused in JSON as in YAML and in request
		// bodies: which of the two values was meant is not for us to guess.
		{"duplicate JSON field", `{"policies":{"a":{"limit":3,"window":"1s","limit":5}}}`, true, `line 1: "limit" is given twice in policies.a`},
		{"duplicate JSON policy", `{"policies":{"a":{"limit":3,"window":"1s"},"a":{"limit":5,"window":"1s"}}}`, true, `line 1: "a" is given twice in policies`},
		{"duplicate JSON cost field", `{"policies":{"a":{"limit":3,"window":"1s","cost":{"header":"X","header":"Y"}}}}`, true, `line 1: "header" is given twice in policies.a.cost`},
		{"duplicate JSON limit field", `{"policies":{"a":{"limits":[{"name":"x","limit":3,"window":"1s","window":"1m"}]}}}`, true, `line 1: "window" is given twice in policies.a.limits[0]`},
		{"duplicate YAML field", "policies:\n  a:\n    limit: 3\n    window: 1s\n    limit: 5", false, `line 5: "limit" is given twice in policies.a (first at line 3)`},
		{"duplicate YAML policy", "policies:\n  a: {limit: 3, window: 1s}\n  a: {limit: 5, window: 1s}\n", false, `line 3: "a" is given twice in policies (first at line 2)`},
		{"JSON field of another case", `{"policies":{"a":{"Limit":3,"window":"1s"}}}`, true, `line 1: unknown field "Limit" in policies.a: the fields there are key, limit,`},
		{"JSON unknown cost field", `{"policies":{"p":{"limit":3,"window":"1s","cost":{"header":"X-C","min":1}}}}`, true,
			`line 1: unknown field "min" in policies.p.cost: the fields there are header, max, default`},
		{"JSON cost max not a number", `{"policies":{"p":{"limit":3,"window":"1s","cost":{"header":"X-C","max":"many"}}}}`, true,
			"line 1: policies.p.cost.max must be a whole number, got a JSON string"},
		{"JSON cost a number", `{"policies":{"p":{"limit":3,"window":"1s","cost":5}}}`, true, `line 1: policies.p.cost: cost must be "header:NAME"`},
		{"JSON type", `{"policies":{"a":{"limit":"3","window":"1s"}}}`, true, `line 1: policies.a.limit must be a whole number, got a JSON string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ratelimit.ParsePolicies([]byte(tt.src), tt.isJSON)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
			wantNoGoType(t, err)
		})
	}
}

func TestRateLimitConfigValidate(t *testing.T) {
	ok := ratelimit.Policy{Name: "p", Limit: ratelimit.Limit{Limit: 3, Window: 10 * time.Second}}
	with := func(f func(*ratelimit.Policy)) ratelimit.Policy { p := ok; f(&p); return p }
	tests := []struct {
		name string
		ps   []ratelimit.Policy
		want string
	}{
		{"limit 0", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.Limit.Limit = 0 })}, `policy "p": limit must be at least 1`},
		{"window too short", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.Window = 10 * time.Millisecond })}, `policy "p": window must be at least 1s`},
		// A policy's window may be as long as a leap year and a day, where an
		// inline limit's stays within the max window (24h).
		{"window too long", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.Window = 368 * 24 * time.Hour })}, `policy "p": window must be at most 8808h0m0s`},
		{"calendar of a token bucket", []ratelimit.Policy{with(func(p *ratelimit.Policy) {
			p.Algorithm, p.Window, p.Calendar = ratelimit.TokenBucket, 0, &ratelimit.Calendar{Period: "month"}
		})}, `policy "p": calendar applies to the fixed_window algorithm only`},
		{"calendar and window", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.Calendar = &ratelimit.Calendar{Period: "day"} })},
			`policy "p": window and calendar exclude each other`},
		{"calendar period", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.Window, p.Calendar = 0, &ratelimit.Calendar{Period: "fortnight"} })},
			`policy "p": calendar must be one of day, week, month, year, got "fortnight"`},
		{"calendar zone", []ratelimit.Policy{with(func(p *ratelimit.Policy) {
			p.Window, p.Calendar = 0, &ratelimit.Calendar{Period: "month", Timezone: "Mars/Olympus"}
		})}, `policy "p": timezone must be an IANA time zone name such as Europe/Berlin, got "Mars/Olympus"`},
		{"week_start of a month", []ratelimit.Policy{with(func(p *ratelimit.Policy) {
			p.Window, p.Calendar = 0, &ratelimit.Calendar{Period: "month", WeekStart: "sunday"}
		})}, `policy "p": week_start applies to calendar: week only`},
		{"week_start", []ratelimit.Policy{with(func(p *ratelimit.Policy) {
			p.Window, p.Calendar = 0, &ratelimit.Calendar{Period: "week", WeekStart: "someday"}
		})}, `policy "p": week_start must be a weekday (monday ... sunday), got "someday"`},
		{"bad algorithm", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.Algorithm = "leaky" })}, `algorithm must be one of`},
		{"burst on a fixed window", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.Burst = 5 })}, `burst applies to the token_bucket algorithm only`},
		{"bad key", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.Key = "cookie:sid" })}, `key must be "ip" or "header:NAME"`},
		{"bad header", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.Key = "header:" })}, `key must be "ip" or "header:NAME"`},
		{"bad deny status", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.DenyStatus = 500 })}, `deny_status must be 401, 403 or 429`},
		{"bad fail mode", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.Fail = "sometimes" })}, `fail must be "open" or "closed"`},
		{"bad name", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.Name = "a b" })}, `policy "a b": names are`},
		{"reserved name", []ratelimit.Policy{with(func(p *ratelimit.Policy) { p.Name = "inline" })}, `reserved`},
		{"duplicate", []ratelimit.Policy{ok, ok}, `policy "p" is defined twice`},
		{"token bucket refilling in over 10 years", []ratelimit.Policy{with(func(p *ratelimit.Policy) {
			p.Algorithm, p.Limit.Limit, p.Window, p.Burst = ratelimit.TokenBucket, 1, 24*time.Hour, 1_000_000_000
		})}, `policy "p": burst × window / limit (the time an empty bucket takes to refill) must be at most 87600h0m0s (10 years), got about 2.74e+06 years`},
		{"token bucket refilling in 10 years and a day", []ratelimit.Policy{with(func(p *ratelimit.Policy) {
			p.Algorithm, p.Limit.Limit, p.Window, p.Burst = ratelimit.TokenBucket, 1, 24*time.Hour, 3651
		})}, `policy "p": burst × window / limit (the time an empty bucket takes to refill) must be at most 87600h0m0s (10 years), got 87624h0m0s`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ratelimit.Config{Policies: tt.ps}.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestValidateTokenBucketRefill checks the bounds on a token bucket: a
// refill time (window × burst / limit) and a window of 10 years are
// accepted, more is refused on the field that makes it long, a limit must
// stay below 2^48, and other algorithms are not concerned.
func TestValidateTokenBucketRefill(t *testing.T) {
	const tenYears = 87600 * time.Hour
	long := ratelimit.Config{MaxWindow: 20 * tenYears}
	tests := []struct {
		name  string
		cfg   ratelimit.Config
		limit ratelimit.Limit
		want  string // "" when valid
	}{
		{"10 years", ratelimit.Config{}, ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 1, Window: 24 * time.Hour, Burst: 3650}, ""},
		{"10 years at a high rate", ratelimit.Config{}, ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 1000, Window: 24 * time.Hour, Burst: 1_000_000_000}, "burst"},
		{"a burst below the limit", ratelimit.Config{}, ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 1_000_000_000, Window: 24 * time.Hour, Burst: 1}, ""},
		{"the window alone, 10 years", long, ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 1, Window: tenYears}, ""},
		{"the window alone, 11 years", long, ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 1, Window: 11 * tenYears / 10}, "window"},
		{"a long window with a small burst", long, ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 100, Window: 11 * tenYears / 10, Burst: 1}, "window"},
		{"a limit of 2^48", ratelimit.Config{MaxLimit: 1 << 50}, ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 1 << 48, Window: time.Second}, "limit"},
		{"a sliding window of 11 years", long, ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Limit: 1, Window: 11 * tenYears / 10}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Policies = []ratelimit.Policy{{Name: "p", Limit: tt.limit}}
			err := cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), `policy "p": `+tt.want+" ") {
				t.Fatalf("Validate = %v, want an error on %s", err, tt.want)
			}
		})
	}
}
