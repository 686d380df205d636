package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// TestDecodeJSON: request bodies are bounded, application/json, one object
// of known fields with the right types, and nothing after it.
func TestDecodeJSON(t *testing.T) {
	runRequestCases(t, []requestCase{
		{desc: "malformed JSON", req: newRequest("POST", "/v1/locks/orders", `{"ttl" "1s"}`), status: 400, typ: "invalid-request", field: "body"},
		{desc: "truncated JSON", req: newRequest("POST", "/v1/locks/orders", `{"ttl":`), status: 400, typ: "invalid-request", field: "body"},
		{desc: "unknown field", req: newRequest("POST", "/v1/locks/orders", `{"tll":"1s"}`), status: 400, typ: "invalid-request", field: "tll"},
		{desc: "trailing object", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1s"} {}`), status: 400, typ: "invalid-request", field: "body"},
		{desc: "trailing garbage", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1s"}x`), status: 400, typ: "invalid-request", field: "body"},
		{desc: "array body", req: newRequest("POST", "/v1/locks/orders", `[{"ttl":"1s"}]`), status: 400, typ: "invalid-request", field: "body"},
		{desc: "string body", req: newRequest("POST", "/v1/locks/orders", `"1s"`), status: 400, typ: "invalid-request", field: "body"},
		{desc: "ttl a number", req: newRequest("POST", "/v1/locks/orders", `{"ttl":30}`), status: 400, typ: "invalid-request", field: "ttl"},
		{desc: "keepalive a string", req: newRequest("POST", "/v1/locks/orders", `{"keepalive":"yes"}`), status: 400, typ: "invalid-request", field: "keepalive"},
		{desc: "body over the limit", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"`+strings.Repeat("9", 2000)+`s"}`),
			cfg: handlers.Config{MaxBodyBytes: 1024}, status: 413, typ: "payload-too-large", inDetail: "1024"},
		{desc: "renew body over the limit", req: newRequest("POST", "/v1/locks/orders/renew", `{"ttl":"`+strings.Repeat("9", 2000)+`s"}`, "Lock-Token", tokenA),
			cfg: handlers.Config{MaxBodyBytes: 1024}, status: 413, typ: "payload-too-large"},
		{desc: "text/plain body", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1s"}`, "Content-Type", "text/plain"), status: 415, typ: "unsupported-media", inDetail: "text/plain"},
		{desc: "body without Content-Type", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1s"}`, "Content-Type", ""), status: 415, typ: "unsupported-media"},
		{desc: "gzip body", req: newRequest("POST", "/v1/locks/orders", "\x1f\x8b\x08\x00", "Content-Encoding", "gzip"), status: 415, typ: "unsupported-media", inDetail: "does not decode Content-Encoding gzip"},
		{desc: "gzip body of JSON", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1s"}`, "Content-Encoding", "gzip"), status: 415, typ: "unsupported-media", inDetail: "gzip"},
		{desc: "renew deflate body", req: newRequest("POST", "/v1/locks/orders/renew", `{}`, "Content-Encoding", "deflate", "Lock-Token", tokenA), status: 415, typ: "unsupported-media", inDetail: "deflate"},
		{desc: "check br body", req: newRequest("POST", "/v1/ratelimit/check", `{"key":"k","policy":"p"}`, "Content-Encoding", "br"), status: 415, typ: "unsupported-media", inDetail: "br"},
		{desc: "identity then gzip", req: newRequest("POST", "/v1/locks/orders", `{}`, "Content-Encoding", "identity, gzip"), status: 415, typ: "unsupported-media", inDetail: "gzip"},
		{desc: "gzip on a second line", req: newRequest("POST", "/v1/locks/orders", `{}`, "Content-Encoding", "identity", "Content-Encoding", "gzip"), status: 415, typ: "unsupported-media", inDetail: "gzip"},
		{desc: "gzip without a body", req: newRequest("POST", "/v1/locks/orders", "", "Content-Encoding", "gzip"), status: 415, typ: "unsupported-media", inDetail: "gzip"},
		{desc: "identity body", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1s"}`, "Content-Encoding", "Identity"), status: 201, calls: []string{"Acquire"}},
		{desc: "renew text/plain body", req: newRequest("POST", "/v1/locks/orders/renew", `{}`, "Content-Type", "text/plain", "Lock-Token", tokenA), status: 415, typ: "unsupported-media"},
		// Member names mean what api/openapi.yaml says: exact, each once.
		{desc: "field name in another case", req: newRequest("POST", "/v1/locks/orders", `{"TTL":"1h","Keepalive":true,"MAX_HOLD":"2h"}`), status: 400, typ: "invalid-request", field: "TTL",
			inDetail: `unknown field "TTL" (field names are case-sensitive: did you mean "ttl"?)`},
		{desc: "one field name in another case", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1h","keepalive":true,"Max_Hold":"2h"}`), status: 400, typ: "invalid-request", field: "Max_Hold", inDetail: `did you mean "max_hold"`},
		{desc: "duplicate ttl", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1s","ttl":"1h"}`), status: 400, typ: "invalid-request", field: "ttl", inDetail: `duplicate field "ttl"`},
		{desc: "duplicate renew ttl", req: newRequest("POST", "/v1/locks/orders/renew", `{"ttl":"1s","ttl":"1h"}`, "Lock-Token", tokenA), status: 400, typ: "invalid-request", field: "ttl", inDetail: `duplicate field "ttl"`},
		{desc: "duplicate limit", req: newRequest("POST", "/v1/ratelimit/check", `{"key":"k","limit":1,"window":"1s","limit":1000000}`), status: 400, typ: "invalid-request", field: "limit", inDetail: `duplicate field "limit"`},
		{desc: "duplicate hold wait", req: newRequest("POST", "/v1/locks/orders/hold", `{"wait":"1s","wait":"1m"}`), status: 400, typ: "invalid-request", field: "wait", inDetail: `duplicate field "wait"`},
		{desc: "escaped duplicate", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1s","\u0074tl":"1h"}`), status: 400, typ: "invalid-request", field: "ttl", inDetail: `duplicate field "ttl"`},
		// Numbers that are not integers say so.
		{desc: "limit with an exponent", req: newRequest("POST", "/v1/ratelimit/check", `{"key":"k","limit":1e3,"window":"1s"}`), status: 400, typ: "invalid-request", field: "limit",
			inDetail: "limit must be an integer written without a fraction or exponent, such as 1000; got 1e3"},
		{desc: "fractional cost", req: newRequest("POST", "/v1/ratelimit/check", `{"key":"k","policy":"p","cost":1.5}`), status: 400, typ: "invalid-request", field: "cost", inDetail: "cost must be an integer, got 1.5"},
		{desc: "limit out of range", req: newRequest("POST", "/v1/ratelimit/check", `{"key":"k","limit":99999999999999999999,"window":"1s"}`), status: 400, typ: "invalid-request", field: "limit", inDetail: "limit is out of range"},
		{desc: "limit a string", req: newRequest("POST", "/v1/ratelimit/check", `{"key":"k","limit":"10","window":"1s"}`), status: 400, typ: "invalid-request", field: "limit", inDetail: "limit must be a JSON number, got a JSON string"},
		{desc: "ttl an object", req: newRequest("POST", "/v1/locks/orders", `{"ttl":{"s":1}}`), status: 400, typ: "invalid-request", field: "ttl", inDetail: "ttl must be a JSON string, got a JSON object"},
		// Durations past what time.Duration holds are out of range, not malformed.
		{desc: "ttl out of range", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"9999999h"}`), status: 400, typ: "invalid-request", field: "ttl",
			inDetail: `ttl is out of range: "9999999h" is longer than any duration Latchkey can hold (at most 2562047h47m16s)`},
		{desc: "wait out of range", req: newRequest("POST", "/v1/locks/orders", `{"wait":"99999999999999999999ns"}`), status: 400, typ: "invalid-request", field: "wait", inDetail: "wait is out of range"},
		{desc: "renew ttl out of range", req: newRequest("POST", "/v1/locks/orders/renew", `{"ttl":"1h9999999h"}`, "Lock-Token", tokenA), status: 400, typ: "invalid-request", field: "ttl", inDetail: "ttl is out of range"},
		{desc: "window out of range", req: newRequest("POST", "/v1/ratelimit/check", `{"key":"k","limit":1,"window":"9999999h"}`), status: 400, typ: "invalid-request", field: "window", inDetail: "window is out of range"},
		{desc: "ttl with an unknown unit", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"9999999d"}`), status: 400, typ: "invalid-request", field: "ttl", inDetail: `must be a positive duration such as "30s" or "1500ms", got "9999999d"`},
		{desc: "ttl of two dots", req: newRequest("POST", "/v1/locks/orders", `{"ttl":"1..5s"}`), status: 400, typ: "invalid-request", field: "ttl", inDetail: "must be a positive duration"},
		{desc: "empty body needs no Content-Type", req: newRequest("POST", "/v1/locks/orders", ""), status: 201, calls: []string{"Acquire"}},
		{desc: "blank body needs no Content-Type", req: newRequest("POST", "/v1/locks/orders", " \n", "Content-Type", ""), status: 201, calls: []string{"Acquire"}},
		{desc: "json with charset", req: newRequest("POST", "/v1/locks/orders", `{}`, "Content-Type", "application/json; charset=utf-8"), status: 201, calls: []string{"Acquire"}},
		{desc: "+json media type", req: newRequest("POST", "/v1/locks/orders", `{}`, "Content-Type", "application/merge-patch+json"), status: 201, calls: []string{"Acquire"}},
	})
}

// TestLongInputIsQuotedShort: a detail that quotes what the client sent
// quotes at most its first 64 characters and says how long it was, whatever
// the field: a 5,000-character value never comes back whole.
func TestLongInputIsQuotedShort(t *testing.T) {
	long := strings.Repeat("x", 5000)
	digits := strings.Repeat("9", 4999)
	pol := perIP(429)
	pol.Cost = ratelimit.CostSource{Header: "X-Tokens", Max: 3, Default: 1}
	tests := []struct {
		desc   string
		req    *http.Request
		status int
		typ    string
		cut    string // the detail's cut quote
	}{
		{"ttl out of range", newRequest("POST", "/v1/locks/orders", `{"ttl":"`+digits+`s"}`), 400, "invalid-request",
			`"` + strings.Repeat("9", 64) + `"… (5000 characters)`},
		{"ttl not a duration", newRequest("POST", "/v1/locks/orders", `{"ttl":"`+long+`"}`), 400, "invalid-request",
			`"` + long[:64] + `"… (5000 characters)`},
		{"wait not a duration", newRequest("POST", "/v1/locks/orders/hold", `{"wait":"`+long+`"}`), 400, "invalid-request", "… (5000 characters)"},
		{"renew ttl", newRequest("POST", "/v1/locks/orders/renew", `{"ttl":"`+long+`"}`, "Lock-Token", tokenA), 400, "invalid-request", "… (5000 characters)"},
		{"window out of range", newRequest("POST", "/v1/ratelimit/check", `{"key":"k","limit":1,"window":"`+digits+`s"}`), 400, "invalid-request", "… (5000 characters)"},
		{"unknown field", newRequest("POST", "/v1/locks/orders", `{"`+long+`":1}`), 400, "invalid-request", "… (5000 characters)"},
		{"duplicate field", newRequest("POST", "/v1/locks/orders", `{"`+long+`":1,"`+long+`":2}`), 400, "invalid-request", "… (5000 characters)"},
		{"number out of range", newRequest("POST", "/v1/ratelimit/check", `{"key":"k","limit":`+digits+`,"window":"1s"}`), 400, "invalid-request",
			strings.Repeat("9", 64) + "… (4999 characters)"},
		{"force", newRequest("DELETE", "/v1/locks/orders?force="+long, "", "Authorization", "Bearer "+adminKey), 400, "invalid-request", "… (5000 characters)"},
		{"Content-Type", newRequest("POST", "/v1/locks/orders", `{}`, "Content-Type", "text/"+long), 415, "unsupported-media", "… (5005 characters)"},
		{"policy in a check", newRequest("POST", "/v1/ratelimit/check", `{"policy":"`+long+`"}`), 404, "policy-not-found", "… (5000 characters)"},
		{"policy of the gate", newRequest("GET", "/v1/ratelimit/gate/"+long, ""), 404, "policy-not-found", "… (5000 characters)"},
		{"cost header", newRequest("GET", "/v1/ratelimit/gate/per-ip", "", "X-Tokens", long), 400, "invalid-request", "… (5000 characters)"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			fake := grantingService()
			rl := decisionFake(pol, ratelimit.Decision{Allowed: true, Policy: pol.Name})
			fake.PolicyFn, fake.CheckFn = rl.PolicyFn, rl.CheckFn
			rec := serve(t, newTestRouter(t, fake, handlers.Config{AdminKey: adminKey}), tt.req)
			p := wantProblem(t, rec, tt.req, tt.status, tt.typ)
			if !strings.Contains(p.Detail, tt.cut) {
				t.Errorf("detail = %q, want it to quote %q", p.Detail, tt.cut)
			}
			// The instance is the request's path, long or not: only what the
			// problem says about the request is cut.
			for _, s := range append([]string{p.Detail}, errorTexts(p)...) {
				if len(s) > 300 {
					t.Errorf("problem text of %d bytes, want the long value cut: %.300s", len(s), s)
				}
			}
		})
	}
}

// errorTexts are the field names and details of a problem's errors.
func errorTexts(p handlers.Problem) []string {
	var out []string
	for _, fe := range p.Errors {
		out = append(out, fe.Field, fe.Detail)
	}
	return out
}

// TestFieldRuleMessages: a field that breaks its rule is named with the rule,
// the bound and the value sent; a value that is there but wrong (0, "") is
// never said to be missing.
func TestFieldRuleMessages(t *testing.T) {
	admin := []string{"Authorization", "Bearer " + adminKey}
	cfg := handlers.Config{AdminKey: adminKey}
	runRequestCases(t, []requestCase{
		{desc: "permits 0", req: newRequest("POST", "/v1/semaphores/pool", `{"permits":0}`), status: 400, typ: "invalid-request", field: "permits", inDetail: "permits must be at least 1, got 0"},
		{desc: "permits over the max", req: newRequest("POST", "/v1/semaphores/pool", `{"permits":2000000}`), status: 400, typ: "invalid-request", field: "permits", inDetail: "permits must be at most 1000000, got 2000000"},
		{desc: "permits missing", req: newRequest("POST", "/v1/semaphores/pool", `{}`), status: 400, typ: "invalid-request", field: "permits", inDetail: "permits is required"},
		{desc: "permits null", req: newRequest("POST", "/v1/semaphores/pool", `{"permits":null}`), status: 400, typ: "invalid-request", field: "permits", inDetail: "permits is required"},
		{desc: "hold permits 0", req: newRequest("POST", "/v1/semaphores/pool/hold", `{"permits":0}`), status: 400, typ: "invalid-request", field: "permits", inDetail: "permits must be at least 1, got 0"},
		{desc: "count 0", req: newRequest("POST", "/v1/semaphores/pool", `{"permits":3,"count":0}`), status: 400, typ: "invalid-request", field: "count", inDetail: "count must be at least 1, got 0"},
		{desc: "set permits 0", req: newRequest("PUT", "/v1/semaphores/pool", `{"permits":0}`, admin...), cfg: cfg, status: 400, typ: "invalid-request", field: "permits", inDetail: "permits must be at least 1, got 0"},
		{desc: "mode empty", req: newRequest("POST", "/v1/rwlocks/doc", `{"mode":""}`), status: 400, typ: "invalid-request", field: "mode", inDetail: `mode must be read or write, got ""`},
		{desc: "mode in capitals", req: newRequest("POST", "/v1/rwlocks/doc", `{"mode":"READ"}`), status: 400, typ: "invalid-request", field: "mode", inDetail: `mode must be read or write, got "READ"`},
		{desc: "hold mode empty", req: newRequest("POST", "/v1/rwlocks/doc/hold", `{"mode":""}`), status: 400, typ: "invalid-request", field: "mode", inDetail: `mode must be read or write, got ""`},
		{desc: "mode missing", req: newRequest("POST", "/v1/rwlocks/doc", `{"ttl":"5s"}`), status: 400, typ: "invalid-request", field: "mode", inDetail: "mode is required"},
		{desc: "mode null", req: newRequest("POST", "/v1/rwlocks/doc", `{"mode":null}`), status: 400, typ: "invalid-request", field: "mode", inDetail: "mode is required"},
		{desc: "algorithm empty", req: newRequest("POST", "/v1/ratelimit/check", `{"key":"k","limit":1,"window":"1s","algorithm":""}`), status: 400, typ: "invalid-request", field: "algorithm",
			inDetail: `algorithm must be fixed_window, sliding_window or token_bucket, got ""`},
	})
}

// TestEmptyAndNullDurations: a duration field sent as "" is no duration, a
// 400 naming the field, on every body that has one; sent as null it takes
// its default, as when it is absent.
func TestEmptyAndNullDurations(t *testing.T) {
	const positive = `must be a positive duration such as "30s" or "1500ms", got ""`
	tests := []requestCase{
		{desc: "window null is no inline limit", req: newRequest("POST", "/v1/ratelimit/check", `{"key":"k","limit":1,"window":null}`), status: 400, typ: "invalid-request", field: "window", inDetail: "window is required"},
		{desc: "window empty", req: newRequest("POST", "/v1/ratelimit/check", `{"key":"k","limit":1,"window":""}`), status: 400, typ: "invalid-request", field: "window", inDetail: "window " + positive},
		{desc: "window empty alone", req: newRequest("POST", "/v1/ratelimit/check", `{"key":"k","window":""}`), status: 400, typ: "invalid-request", field: "window", inDetail: "window " + positive},
		{desc: "renew ttl empty", req: newRequest("POST", "/v1/locks/orders/renew", `{"ttl":""}`, "Lock-Token", tokenA), status: 400, typ: "invalid-request", field: "ttl", inDetail: "ttl " + positive},
		{desc: "renew ttl null", req: newRequest("POST", "/v1/locks/orders/renew", `{"ttl":null}`, "Lock-Token", tokenA), status: 200, calls: []string{"Renew"}},
	}
	for _, route := range []struct{ path, body string }{
		{"/v1/locks/orders", `{"keepalive":true,%s}`},
		{"/v1/locks/orders/hold", `{%s}`},
		{"/v1/rwlocks/doc", `{"mode":"read","keepalive":true,%s}`},
		{"/v1/rwlocks/doc/hold", `{"mode":"read",%s}`},
		{"/v1/semaphores/pool", `{"permits":2,"keepalive":true,%s}`},
		{"/v1/semaphores/pool/hold", `{"permits":2,%s}`},
	} {
		fields := []string{"ttl", "wait"}
		if !strings.HasSuffix(route.path, "/hold") {
			fields = append(fields, "max_hold", "heartbeat")
		}
		for _, f := range fields {
			detail := f + " " + positive
			if f == "wait" {
				detail = `wait must be a duration such as "0s", "5s" or "1500ms", got ""`
			}
			tests = append(tests, requestCase{desc: route.path + " " + f + " empty",
				req:    newRequest("POST", route.path, strings.Replace(route.body, "%s", `"`+f+`":""`, 1)),
				status: 400, typ: "invalid-request", field: f, inDetail: detail})
		}
	}
	runRequestCases(t, tests)

	// null is the default: the service is asked with no duration at all.
	var got []locks.AcquireRequest
	fake := grantingService()
	acquire := fake.AcquireFn
	fake.AcquireFn = func(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
		got = append(got, req)
		return acquire(ctx, name, req)
	}
	h := newTestRouter(t, fake, handlers.Config{})
	for _, body := range []string{`{"ttl":null,"wait":null,"keepalive":true,"max_hold":null,"heartbeat":null}`, `{"keepalive":true}`} {
		if rec := serve(t, h, newRequest("POST", "/v1/locks/orders", body)); rec.Code != http.StatusCreated {
			t.Fatalf("%s: status = %d, want 201 (body %s)", body, rec.Code, rec.Body)
		}
	}
	if want := []locks.AcquireRequest{{Keepalive: true}, {Keepalive: true}}; !cmp.Equal(got, want) {
		t.Errorf("service requests (-want +got):\n%s", cmp.Diff(want, got))
	}
}

// TestDuplicateHeadersAreRefused: every header Latchkey reads, sent twice,
// is a 400 naming it, in one shape, whatever the route; none of its values
// is picked, and the service is not asked.
func TestDuplicateHeadersAreRefused(t *testing.T) {
	keyed := ratelimit.Policy{Name: "per-key", Key: "header:X-Api-Key", DenyStatus: 429, Fail: ratelimit.FailOpen,
		Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 3, Window: 10 * time.Second}}
	costly := perIP(429)
	costly.Cost = ratelimit.CostSource{Header: "X-Tokens", Max: 3, Default: 1}
	multi := ratelimit.Policy{Name: "multi", DenyStatus: 429, Fail: ratelimit.FailOpen, Limits: []ratelimit.NamedLimit{
		{Name: "per-ip", Key: "ip", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 3, Window: time.Second}},
		{Name: "per-key", Key: "header:X-Api-Key", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 3, Window: time.Second}},
	}}
	policies := map[string]ratelimit.Policy{keyed.Name: keyed, costly.Name: costly, multi.Name: multi}
	twice := func(name string) []string {
		return []string{name, "a-value-0123456789abcdef", name, "b-value-0123456789abcdef"}
	}
	tokens := twice("Lock-Token")
	withKeys := authConfig(mustKeySet(t, ""))
	ops := []string{"Authorization", "Bearer " + testSecret("ops")}
	tests := []struct {
		desc   string
		req    *http.Request
		cfg    handlers.Config
		header string
	}{
		{"acquire, Lock-Token", newRequest("POST", "/v1/locks/orders", "", tokens...), handlers.Config{}, "Lock-Token"},
		{"inspect, Lock-Token", newRequest("GET", "/v1/locks/orders", "", tokens...), handlers.Config{}, "Lock-Token"},
		{"renew, Lock-Token", newRequest("POST", "/v1/locks/orders/renew", "", tokens...), handlers.Config{}, "Lock-Token"},
		{"release, Lock-Token", newRequest("DELETE", "/v1/locks/orders", "", tokens...), handlers.Config{}, "Lock-Token"},
		{"hold, Lock-Token", newRequest("POST", "/v1/locks/orders/hold", "", tokens...), handlers.Config{}, "Lock-Token"},
		{"rwlock acquire, Lock-Token", newRequest("POST", "/v1/rwlocks/doc", `{"mode":"read"}`, tokens...), handlers.Config{}, "Lock-Token"},
		{"rwlock inspect, Lock-Token", newRequest("GET", "/v1/rwlocks/doc", "", tokens...), handlers.Config{}, "Lock-Token"},
		{"rwlock release, Lock-Token", newRequest("DELETE", "/v1/rwlocks/doc", "", tokens...), handlers.Config{}, "Lock-Token"},
		{"semaphore acquire, Lock-Token", newRequest("POST", "/v1/semaphores/pool", `{"permits":2}`, tokens...), handlers.Config{}, "Lock-Token"},
		{"semaphore inspect, Lock-Token", newRequest("GET", "/v1/semaphores/pool", "", tokens...), handlers.Config{}, "Lock-Token"},
		{"semaphore renew, Lock-Token", newRequest("POST", "/v1/semaphores/pool/renew", "", tokens...), handlers.Config{}, "Lock-Token"},
		{"force-release, Authorization", newRequest("DELETE", "/v1/locks/orders?force=true", "", "Authorization", "Bearer "+adminKey, "Authorization", "Bearer "+adminKey),
			handlers.Config{AdminKey: adminKey}, "Authorization"},
		{"set permits, Authorization", newRequest("PUT", "/v1/semaphores/pool", `{"permits":2}`, "Authorization", "Bearer "+adminKey, "Authorization", "Bearer nobody"),
			handlers.Config{AdminKey: adminKey}, "Authorization"},
		{"API keys, Authorization", newRequest("GET", "/v1/locks/orders", "", append(ops, ops...)...), withKeys, "Authorization"},
		{"API keys, Authorization, policies", newRequest("GET", "/v1/ratelimit/policies", "", append(ops, ops...)...), withKeys, "Authorization"},
		{"API keys, Latchkey-Tenant", newRequest("GET", "/v1/locks/orders", "", append(ops, handlers.TenantHeader, "acme", handlers.TenantHeader, "other")...),
			withKeys, handlers.TenantHeader},
		{"Content-Type", newRequest("POST", "/v1/locks/orders", `{}`, "Content-Type", "application/json", "Content-Type", "application/json"), handlers.Config{}, "Content-Type"},
		{"gate key header", newRequest("GET", "/v1/ratelimit/gate/per-key", "", twice("X-Api-Key")...), handlers.Config{}, "X-Api-Key"},
		{"check key header", newRequest("POST", "/v1/ratelimit/check", `{"policy":"per-key"}`, twice("X-Api-Key")...), handlers.Config{}, "X-Api-Key"},
		{"multi-limit gate key header", newRequest("GET", "/v1/ratelimit/gate/multi", "", twice("X-Api-Key")...), handlers.Config{}, "X-Api-Key"},
		{"gate cost header", newRequest("GET", "/v1/ratelimit/gate/per-ip", "", "X-Tokens", "1", "X-Tokens", "2"), handlers.Config{}, "X-Tokens"},
		{"check cost header", newRequest("POST", "/v1/ratelimit/check", `{"policy":"per-ip","key":"k"}`, "X-Tokens", "1", "X-Tokens", "1"), handlers.Config{}, "X-Tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			fake := grantingService()
			fake.PolicyFn = func(name string) (ratelimit.Policy, error) { return policies[name], nil }
			rec := serve(t, newTestRouter(t, fake, tt.cfg), tt.req)
			p := wantProblem(t, rec, tt.req, http.StatusBadRequest, "invalid-request")
			want := []handlers.FieldError{{Field: tt.header, Rule: "once", Detail: "the " + tt.header + " header must be sent once, got 2 values"}}
			if diff := cmp.Diff(want, p.Errors); diff != "" || p.Detail != want[0].Detail {
				t.Errorf("detail %q, errors (-want +got):\n%s", p.Detail, diff)
			}
			for _, call := range fake.Calls() {
				if call != "Policy" {
					t.Errorf("service called: %v, want no call but the policy's look-up", fake.Calls())
				}
			}
		})
	}
}
