package ratelimit_test

import (
	"errors"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
)

// testSource is a request as the HTTP layer hands it to the domain: a
// client key (or the error of finding it), headers and, for a request to
// the gate, the path's remainder after the policy.
type testSource struct {
	client    string
	clientErr error
	headers   map[string][]string // by canonical name
	gate      bool
	path      string
}

func (s testSource) ClientKey() (string, error) { return s.client, s.clientErr }

func (s testSource) Header(name string) []string {
	return s.headers[textproto.CanonicalMIMEHeaderKey(name)]
}

func (s testSource) GatePath() (string, bool) { return s.path, s.gate }

// sourcePolicies are a policy of every key source and one that takes its
// cost from a header.
func sourcePolicies() []ratelimit.Policy {
	fw := func(limit int64) ratelimit.Limit {
		return ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: limit, Window: time.Minute}
	}
	return []ratelimit.Policy{
		{Name: "per-ip", Key: "ip", DenyStatus: 403, Limit: fw(3)},
		{Name: "per-key", Key: "header:X-Api-Key", Limit: fw(3)},
		{Name: "costly", Key: "ip", Limit: fw(10), Cost: ratelimit.CostSource{Header: "X-Tokens", Max: 5, Default: 2}},
		{Name: "api", Limits: []ratelimit.NamedLimit{
			{Name: "by-ip", Key: "ip", Limit: fw(10)},
			{Name: "by-key", Key: "header:X-Api-Key", Limit: fw(10)},
			{Name: "all", Key: "const", Limit: fw(100)},
			{Name: "by-path", Key: "path", Limit: fw(10)},
			{Name: "by-ip-again", Key: "ip", Limit: fw(20)},
		}},
	}
}

// TestGateTakesKeysAndCostFromTheSource: the gate decides under the key
// each limit's source gives (the client's address found once), the cost
// the cost header gives or its default, and answers the policy's deny
// status; the counters are the ones Keys names for those keys.
func TestGateTakesKeysAndCostFromTheSource(t *testing.T) {
	svc, m := newTestService(t, rlConfig(0, sourcePolicies()...))
	calls := 0
	src := testSource{client: "192.0.2.7", gate: true, path: "orders/42",
		headers: map[string][]string{"X-Api-Key": {"k-1"}, "X-Tokens": {"4"}}}
	counting := countingSource{testSource: src, clientCalls: &calls}
	tests := []struct {
		policy     string
		keys       []string
		cost       int64
		denyStatus int
		asked      int // times the client's address is asked for
	}{
		{"per-ip", []string{"192.0.2.7"}, 1, 403, 1},
		{"per-key", []string{"k-1"}, 1, 429, 0},
		{"costly", []string{"192.0.2.7"}, 4, 429, 1},
		{"api", []string{"192.0.2.7", "k-1", "const", "orders/42", "192.0.2.7"}, 1, 429, 1},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			calls = 0
			d, deny, err := svc.Gate(t.Context(), tt.policy, counting)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || deny != tt.denyStatus || calls != tt.asked {
				t.Errorf("allowed %v, deny status %d, client address asked %d times; want allowed, %d, %d", d.Allowed, deny, calls, tt.denyStatus, tt.asked)
			}
			pol, _ := svc.Policy(tt.policy)
			for _, k := range svc.Keys(pol, tt.keys) {
				if got, err := m.Get(k); err != nil || got != strconv.FormatInt(tt.cost, 10) {
					t.Errorf("counter %s = %q (%v), want %d", k, got, err, tt.cost)
				}
			}
		})
	}
	// Without the cost header, the policy's default.
	noCost := src
	noCost.headers = map[string][]string{}
	noCost.client = "192.0.2.8"
	if _, _, err := svc.Gate(t.Context(), "costly", noCost); err != nil {
		t.Fatal(err)
	}
	pol, _ := svc.Policy("costly")
	if got, _ := m.Get(svc.Keys(pol, []string{"192.0.2.8"})[0]); got != "2" {
		t.Errorf("without the cost header: counter %q, want the default cost 2", got)
	}
}

// countingSource counts how often the client's address is asked for.
type countingSource struct {
	testSource
	clientCalls *int
}

func (s countingSource) ClientKey() (string, error) {
	*s.clientCalls++
	return s.testSource.ClientKey()
}

// TestGateRefusesWhatTheSourceCannotGive: a key or cost the request cannot
// give is an invalid request naming the client address, header or path, the
// rule and the bound, and Redis is left as it was.
func TestGateRefusesWhatTheSourceCannotGive(t *testing.T) {
	svc, m := newTestService(t, rlConfig(0, sourcePolicies()...))
	full := testSource{client: "192.0.2.7", gate: true, path: "orders/42",
		headers: map[string][]string{"X-Api-Key": {"k-1"}}}
	with := func(f func(*testSource)) testSource {
		s := full
		s.headers = map[string][]string{"X-Api-Key": {"k-1"}}
		f(&s)
		return s
	}
	tests := []struct {
		name   string
		policy string
		src    testSource
		want   store.ValidationError
	}{
		{"no client address", "per-ip", with(func(s *testSource) { s.clientErr = errors.New(`cannot parse the client address "x"`) }),
			store.ValidationError{Field: "client", Rule: "address", Detail: `cannot parse the client address "x"`}},
		{"no key header", "per-key", with(func(s *testSource) { s.headers = nil }),
			store.ValidationError{Field: "X-Api-Key", Rule: "required", Detail: "policy per-key takes its key from the X-Api-Key header, which is missing"}},
		{"an empty key header", "per-key", with(func(s *testSource) { s.headers["X-Api-Key"] = []string{""} }),
			store.ValidationError{Field: "X-Api-Key", Rule: "required", Detail: "policy per-key takes its key from the X-Api-Key header, which is missing"}},
		{"the key header twice", "per-key", with(func(s *testSource) { s.headers["X-Api-Key"] = []string{"a", "b"} }),
			store.ValidationError{Field: "X-Api-Key", Rule: "once", Detail: "the X-Api-Key header must be sent once, got 2 values"}},
		{"a key header with a brace", "per-key", with(func(s *testSource) { s.headers["X-Api-Key"] = []string{"a{b"} }),
			store.ValidationError{Field: "X-Api-Key", Rule: "format", Detail: "X-Api-Key must be 1-256 printable ASCII characters without spaces, { or }"}},
		{"a limit's key header missing", "api", with(func(s *testSource) { s.headers = nil }),
			store.ValidationError{Field: "X-Api-Key", Rule: "required", Detail: "limit by-key of policy api takes its key from the X-Api-Key header, which is missing"}},
		{"no path key", "api", with(func(s *testSource) { s.path = "" }),
			store.ValidationError{Field: "path", Rule: "required", Detail: "limit by-path of policy api takes its key from the path after /v1/ratelimit/gate/api/, which is missing"}},
		{"a path key with a brace", "api", with(func(s *testSource) { s.path = "a{b" }),
			store.ValidationError{Field: "path", Rule: "format", Detail: "path must be 1-256 printable ASCII characters without spaces, { or }"}},
		{"not a gate request", "api", with(func(s *testSource) { s.gate, s.path = false, "" }),
			store.ValidationError{Field: "key", Rule: "required", Detail: "limit by-path of policy api takes its key from the gate path (/v1/ratelimit/gate/api/KEY): give key in the body"}},
		{"the cost header twice", "costly", with(func(s *testSource) { s.headers["X-Tokens"] = []string{"1", "1"} }),
			store.ValidationError{Field: "X-Tokens", Rule: "once", Detail: "the X-Tokens header must be sent once, got 2 values"}},
		{"a cost above its max", "costly", with(func(s *testSource) { s.headers["X-Tokens"] = []string{"6"} }),
			store.ValidationError{Field: "X-Tokens", Rule: "max", Detail: "X-Tokens (the cost of a request under policy costly) must be at most 5, got 6"}},
		{"an empty cost", "costly", with(func(s *testSource) { s.headers["X-Tokens"] = []string{""} }),
			store.ValidationError{Field: "X-Tokens", Rule: "format", Detail: `X-Tokens (the cost of a request under policy costly) must be a positive integer, got ""`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := svc.Gate(t.Context(), tt.policy, tt.src)
			var ve *store.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("Gate: %v, want a *ValidationError", err)
			}
			if diff := cmp.Diff(tt.want, *ve); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			// Check completes a request from its source the same way.
			_, err = svc.Check(t.Context(), ratelimit.Request{Policy: tt.policy, From: tt.src})
			if !errors.As(err, &ve) || cmp.Diff(tt.want, *ve) != "" {
				t.Errorf("Check with the source: %v, want %v", err, &tt.want)
			}
			if keys := m.Keys(); len(keys) != 0 {
				t.Errorf("Redis holds %q after a refused request, want nothing", keys)
			}
		})
	}
	if _, _, err := svc.Gate(t.Context(), "nope", full); !errors.As(err, new(*ratelimit.PolicyNotFoundError)) {
		t.Errorf("unknown policy: %v, want a *PolicyNotFoundError", err)
	}
}

// TestCheckCompletesFromTheSource: Check takes from its source only what
// the request does not give (a key in it is every limit's but a "const"
// one's, a cost in it is the cost), and counts on the same counters as the
// gate.
func TestCheckCompletesFromTheSource(t *testing.T) {
	svc, m := newTestService(t, rlConfig(0, sourcePolicies()...))
	src := testSource{client: "192.0.2.7", headers: map[string][]string{"X-Tokens": {"3"}}}
	if _, _, err := svc.Gate(t.Context(), "costly", src); err != nil {
		t.Fatal(err)
	}
	d := mustCheck(t, svc, ratelimit.Request{Policy: "costly", From: src})
	if d.Key != "192.0.2.7" || d.Remaining != 4 {
		t.Errorf("check from the source: key %q, remaining %d; want the gate's counter, 10-3-3 = 4 left", d.Key, d.Remaining)
	}
	d = mustCheck(t, svc, ratelimit.Request{Policy: "costly", Key: "user-1", Cost: 1, From: src})
	if d.Key != "user-1" || d.Remaining != 9 {
		t.Errorf("check with its own key and cost: key %q, remaining %d; want user-1 with 9 left", d.Key, d.Remaining)
	}
	pol, _ := svc.Policy("api")
	if d = mustCheck(t, svc, ratelimit.Request{Policy: "api", Key: "k", From: src}); !d.Allowed {
		t.Fatalf("a multi-limit check with a key: %+v, want allowed", d)
	}
	for _, k := range svc.Keys(pol, []string{"k", "k", "const", "k", "k"}) {
		if !m.Exists(k) {
			t.Errorf("a multi-limit check with a key: no counter %s, want every limit on k but the const one", k)
		}
	}
	if stats := svc.PolicyStats(t.Context())["costly"]; stats.SinceStart.Allowed != 3 {
		t.Errorf("views: %+v, want the gate's decision and the checks' counted", stats)
	}
}

// TestOneLimitListTakesItsKeyAsAListOfMany: a limits: list of one limit,
// which travels without a key slice, takes its key from each source as the
// same limit does in a longer list, counts it under the key Keys names,
// and refuses a missing header or a bad key the same way.
func TestOneLimitListTakesItsKeyAsAListOfMany(t *testing.T) {
	fw := ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 10, Window: time.Minute}
	var pols []ratelimit.Policy
	sources := []string{"ip", "header:X-Api-Key", "const", "path"}
	for _, key := range sources {
		name := strings.NewReplacer(":", "-", "X-Api-Key", "key").Replace(key)
		pols = append(pols,
			ratelimit.Policy{Name: "one-" + name, Limits: []ratelimit.NamedLimit{{Name: "l", Key: key, Limit: fw}}},
			ratelimit.Policy{Name: "two-" + name, Limits: []ratelimit.NamedLimit{{Name: "l", Key: key, Limit: fw}, {Name: "other", Key: "const", Limit: fw}}})
	}
	svc, m := newTestService(t, rlConfig(0, pols...))
	good := testSource{client: "192.0.2.7", gate: true, path: "orders/42", headers: map[string][]string{"X-Api-Key": {"k-1"}}}
	for _, key := range sources {
		name := strings.NewReplacer(":", "-", "X-Api-Key", "key").Replace(key)
		t.Run(name, func(t *testing.T) {
			one, _, err := svc.Gate(t.Context(), "one-"+name, good)
			if err != nil {
				t.Fatal(err)
			}
			two, _, err := svc.Gate(t.Context(), "two-"+name, good)
			if err != nil {
				t.Fatal(err)
			}
			if len(one.Limits) != 1 || one.Limits[0].Key != two.Limits[0].Key || one.Limits[0].Remaining != 9 {
				t.Errorf("one-limit list: limits %+v, want one limit on key %q with 9 left", one.Limits, two.Limits[0].Key)
			}
			p, _ := svc.Policy("one-" + name)
			rkey := svc.Keys(p, []string{one.Limits[0].Key})[0]
			if v, err := m.Get(rkey); err != nil || v != "1" {
				t.Errorf("counter %s = %q (%v), want 1", rkey, v, err)
			}
			if d := mustCheck(t, svc, ratelimit.Request{Policy: "one-" + name, Key: "192.0.2.7"}); len(d.Limits) != 1 {
				t.Errorf("check: limits %+v, want one", d.Limits)
			}
		})
	}
	_, _, errOne := svc.Gate(t.Context(), "one-header-key", testSource{client: "192.0.2.7", gate: true})
	_, _, errTwo := svc.Gate(t.Context(), "two-header-key", testSource{client: "192.0.2.7", gate: true})
	if !errors.Is(errOne, store.ErrInvalid) || errOne == nil || errTwo == nil || strings.ReplaceAll(errTwo.Error(), "two-", "one-") != errOne.Error() {
		t.Errorf("missing header: one-limit list %v, longer list %v; want the same refusal", errOne, errTwo)
	}
	if _, err := svc.Check(t.Context(), ratelimit.Request{Policy: "one-ip", Key: "has space"}); !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "limit l") {
		t.Errorf("bad key: %v, want a validation error naming limit l", err)
	}
}
