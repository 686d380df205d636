package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// multi is a multi-limit policy of the given limits.
func multi(name string, ls ...ratelimit.NamedLimit) ratelimit.Policy {
	return ratelimit.Policy{Name: name, Limits: ls}
}

func nl(name, key string, alg ratelimit.Algorithm, limit int64, window time.Duration) ratelimit.NamedLimit {
	return ratelimit.NamedLimit{Name: name, Key: key, Limit: ratelimit.Limit{Algorithm: alg, Limit: limit, Window: window}}
}

// counts reads the stored value of every key of a decision (missing: "").
func counts(m *miniredis.Miniredis, keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i], _ = m.Get(k)
	}
	return out
}

// TestMultiLimitEachBindsInTurn runs a three-limit policy until each limit
// denies in turn, and checks that a denial leaves every limit's stored
// count exactly as it was.
func TestMultiLimitEachBindsInTurn(t *testing.T) {
	reg := prometheus.NewRegistry()
	pol := multi("api",
		nl("per-ip", "ip", ratelimit.FixedWindow, 2, 10*time.Second),
		nl("per-key", "header:X-Api-Key", ratelimit.SlidingWindow, 3, time.Minute),
		nl("global", "const", ratelimit.TokenBucket, 4, time.Hour))
	cfg := rlConfig(0, pol)
	cfg.Registerer = reg
	svc, m := newTestService(t, cfg)
	dec := func(ip string) ratelimit.Decision {
		return mustCheck(t, svc, ratelimit.Request{Policy: "api", Keys: []string{ip, "k1", ratelimit.ConstKey}})
	}
	keysOf := func(ip string) []string {
		p, _ := svc.Policy("api")
		return svc.MultiKeys(p, []string{ip, "k1", ratelimit.ConstKey})
	}
	// Two from one address: per-ip (2) is then the binding limit.
	for i := range 2 {
		d := dec("192.0.2.1")
		if !d.Allowed || d.Binding != "per-ip" || d.Remaining != int64(1-i) || d.Limit != 2 || d.Key != "192.0.2.1" {
			t.Fatalf("request %d: %+v, want allowed bound by per-ip with %d left", i+1, d, 1-i)
		}
	}
	before := counts(m, keysOf("192.0.2.1"))
	d := dec("192.0.2.1")
	if d.Allowed || d.Binding != "per-ip" || d.RetryAfter != 10*time.Second+time.Millisecond {
		t.Fatalf("3rd from one address: %+v, want denied by per-ip, retry 10.001s", d)
	}
	if want := []bool{false, true, true}; d.Limits[0].Allowed != want[0] || d.Limits[1].Allowed != want[1] || d.Limits[2].Allowed != want[2] {
		t.Fatalf("limits: %+v, want only per-ip denying", d.Limits)
	}
	if d.Limits[1].Remaining != 1 || d.Limits[2].Remaining != 2 {
		t.Fatalf("untouched limits report %+v, want per-key 1 and global 2 left now", d.Limits)
	}
	if after := counts(m, keysOf("192.0.2.1")); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a denial by per-ip changed the counts: %q, then %q", before, after)
	}
	// A third from another address: per-key (3) binds next, then denies.
	d = dec("192.0.2.2")
	if !d.Allowed || d.Binding != "per-key" || d.Remaining != 0 {
		t.Fatalf("3rd overall: %+v, want allowed bound by per-key, 0 left", d)
	}
	before = counts(m, keysOf("192.0.2.3"))
	if d = dec("192.0.2.3"); d.Allowed || d.Binding != "per-key" || d.Limits[0].Remaining != 2 {
		t.Fatalf("4th overall: %+v, want denied by per-key with a fresh per-ip", d)
	}
	if after := counts(m, keysOf("192.0.2.3")); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a denial by per-key changed the counts: %q, then %q", before, after)
	}
	// Once the sliding window has passed, the token bucket (4 per hour,
	// three taken) binds: one more, then it denies.
	m.FastForward(2 * time.Minute)
	if d = dec("192.0.2.4"); !d.Allowed || d.Binding != "global" || d.Remaining != 0 {
		t.Fatalf("after the sliding window: %+v, want allowed bound by global, 0 left", d)
	}
	before = counts(m, keysOf("192.0.2.5"))
	d = dec("192.0.2.5")
	if d.Allowed || d.Binding != "global" || d.RetryAfter != d.Limits[2].RetryAfter || d.RetryAfter < 10*time.Minute {
		t.Fatalf("5th overall: %+v, want denied by global (a token per 15m)", d)
	}
	if after := counts(m, keysOf("192.0.2.5")); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a denial by global changed the counts: %q, then %q", before, after)
	}
	for _, c := range []struct {
		limit, result string
		want          float64
	}{{"per-ip", "denied", 1}, {"per-key", "denied", 1}, {"global", "denied", 1},
		{"global", "allowed", 4}, {"per-ip", "allowed", 4}, {"global", "blocked", 2}, {"per-ip", "blocked", 2}} {
		if got := storetest.CounterValue(t, reg, "latchkey_ratelimit_limit_decisions_total", "policy", "api", "limit", c.limit, "result", c.result); got != c.want {
			t.Errorf("limit %s %s: %v, want %v", c.limit, c.result, got, c.want)
		}
	}
}

// TestMultiLimitRetryAfterIsLatest: when two limits deny, the decision
// waits for the later one, and reports it as binding.
func TestMultiLimitRetryAfterIsLatest(t *testing.T) {
	svc, m := newTestService(t, rlConfig(0, multi("two",
		nl("short", "ip", ratelimit.FixedWindow, 1, 10*time.Second),
		nl("long", "ip", ratelimit.FixedWindow, 1, time.Minute))))
	req := ratelimit.Request{Policy: "two", Key: "192.0.2.1"}
	mustCheck(t, svc, req)
	m.FastForward(time.Second)
	d := mustCheck(t, svc, req)
	if d.Allowed || d.Binding != "long" || d.RetryAfter != 59*time.Second+time.Millisecond || d.Limits[0].RetryAfter != 9*time.Second+time.Millisecond {
		t.Fatalf("denied by both: %+v, want bound by long, retry 59.001s", d)
	}
}

// TestMultiLimitCost: the cost counts in every limit, and may not exceed
// the smallest limit.
func TestMultiLimitCost(t *testing.T) {
	svc, _ := newTestService(t, rlConfig(0, multi("c",
		nl("a", "ip", ratelimit.FixedWindow, 10, time.Minute),
		nl("b", "const", ratelimit.TokenBucket, 5, time.Minute))))
	d := mustCheck(t, svc, ratelimit.Request{Policy: "c", Key: "x", Cost: 4})
	if !d.Allowed || d.Limits[0].Remaining != 6 || d.Limits[1].Remaining != 1 || d.Binding != "b" {
		t.Fatalf("cost 4: %+v, want 6 and 1 left, bound by b", d)
	}
	if _, err := svc.Check(t.Context(), ratelimit.Request{Policy: "c", Key: "x", Cost: 6}); err == nil {
		t.Fatal("cost 6 over a limit of 5: no error")
	}
}

// TestMultiLimitMirrorsSingleScripts: a one-limit "limits:" policy decides
// exactly as the single-limit script of its algorithm, answer by answer and
// stored value by stored value, over random costs and clock steps.
func TestMultiLimitMirrorsSingleScripts(t *testing.T) {
	for _, alg := range ratelimit.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			single := ratelimit.Policy{Name: "one", Key: "ip", Limit: ratelimit.Limit{Algorithm: alg, Limit: 7, Window: 10 * time.Second}}
			l := nl("only", "ip", alg, 7, 10*time.Second)
			if alg == ratelimit.TokenBucket {
				single.Burst, l.Burst = 9, 9
			}
			svc, m := newTestService(t, rlConfig(0, single, multi("many", l)))
			mp, _ := svc.Policy("many")
			mkey := svc.MultiKeys(mp, []string{"k"})[0]
			skey := "latchkey:rl:" + map[ratelimit.Algorithm]string{ratelimit.FixedWindow: "fw", ratelimit.SlidingWindow: "sw", ratelimit.TokenBucket: "tb"}[alg] + ":one:k"
			rng := rand.New(rand.NewPCG(1, uint64(len(alg))))
			denials := 0
			for i := range 300 {
				cost := 1 + rng.Int64N(3)
				a := mustCheck(t, svc, ratelimit.Request{Policy: "one", Key: "k", Cost: cost})
				b := mustCheck(t, svc, ratelimit.Request{Policy: "many", Key: "k", Cost: cost})
				if a.Allowed != b.Allowed || a.Remaining != b.Remaining || a.ResetAfter != b.ResetAfter || a.RetryAfter != b.RetryAfter {
					t.Fatalf("step %d, cost %d: single %+v, multi %+v", i, cost, a, b)
				}
				sv, _ := m.Get(skey)
				mv, _ := m.Get(mkey)
				if sv != mv || m.TTL(skey) != m.TTL(mkey) {
					t.Fatalf("step %d: stored %q (ttl %s) by the single script, %q (ttl %s) by the multi script", i, sv, m.TTL(skey), mv, m.TTL(mkey))
				}
				if !a.Allowed {
					denials++
				}
				m.FastForward(time.Duration(rng.Int64N(1500)) * time.Millisecond)
			}
			if denials < 30 || denials > 270 {
				t.Fatalf("%d denials of 300: the steps do not exercise both answers", denials)
			}
		})
	}
}

// hashTag is a key's Redis Cluster hash tag: what the first '{' and the
// first '}' after it enclose, when not empty; else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// TestMultiLimitKeysShareOneHashTag: the keys of one multi-limit decision
// name their limit and algorithm and share one hash tag, so one script call
// touches one Cluster slot: the policy and the request's key when every
// limit keys on the same source, the policy alone otherwise. A leased
// single-limit policy keeps its one key, as it is without a lease.
func TestMultiLimitKeysShareOneHashTag(t *testing.T) {
	lease := nl("c", "const", ratelimit.FixedWindow, 10, time.Second)
	lease.Lease = 5
	svc, _ := newTestService(t, rlConfig(0,
		multi("same", nl("a", "ip", ratelimit.FixedWindow, 1, time.Second), nl("b", "ip", ratelimit.TokenBucket, 1, time.Second)),
		multi("mixed", nl("a", "ip", ratelimit.FixedWindow, 1, time.Second), nl("b", "const", ratelimit.SlidingWindow, 1, time.Second), lease),
		leased("one", 10, 5), fixed("plain", 10, time.Second)))
	for _, c := range []struct {
		policy string
		keys   []string
		want   string
		tag    string
	}{
		{"same", []string{"k", "k"}, "[latchkey:rl:{same:k}:a:fw latchkey:rl:{same:k}:b:tb]", "same:k"},
		{"mixed", []string{"k", "const", "const"}, "[latchkey:rl:{mixed}:a:fw:k latchkey:rl:{mixed}:b:sw:const latchkey:rl:{mixed}:c:fw:const]", "mixed"},
		{"one", []string{"k"}, "[latchkey:rl:fw:one:k]", "latchkey:rl:fw:one:k"},
		{"plain", []string{"k"}, "[latchkey:rl:fw:plain:k]", "latchkey:rl:fw:plain:k"},
	} {
		p, err := svc.Policy(c.policy)
		if err != nil {
			t.Fatal(err)
		}
		keys := svc.Keys(p, c.keys)
		if got := fmt.Sprint(keys); got != c.want {
			t.Errorf("%s: keys %s, want %s", c.policy, got, c.want)
		}
		for _, k := range keys {
			if got := hashTag(k); got != c.tag {
				t.Errorf("%s: key %s has hash tag %q, want %q", c.policy, k, got, c.tag)
			}
		}
	}
}

// TestMultiLimitPolicyFile reads the "limits:" form and refuses its
// mistakes with the policy and limit named.
func TestMultiLimitPolicyFile(t *testing.T) {
	ps, err := ratelimit.ParsePolicies([]byte(`
policies:
  api:
    limits:
      - {name: per-ip, key: ip, limit: 10, window: 1s}
      - {name: per-key, key: "header:X-Api-Key", limit: 1000, window: 1m, algorithm: sliding_window}
      - {name: per-path, key: path, limit: 5, window: 1m, algorithm: token_bucket, burst: 8}
  short: {limit: 3, window: 10s}
`), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || len(ps[0].Limits) != 3 || ps[0].Limits[0].Algorithm != ratelimit.FixedWindow || ps[0].Limits[2].Burst != 8 || ps[1].Multi() {
		t.Fatalf("parsed %+v", ps)
	}
	if err := (ratelimit.Config{Policies: ps}).Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	for _, c := range []struct{ file, want string }{
		{`{policies: {p: {limits: [{name: a, limit: 1}]}}}`, `policy "p": limits[0] (a): window is required`},
		{`{policies: {p: {limit: 1, window: 1s, limits: [{name: a, limit: 1, window: 1s}]}}}`, `policy "p": give either limits or a single limit`},
		{`{policies: {p: {limits: [{name: a, limit: 1, window: 1s, lease: 3, burst_x: 1}]}}}`, `line 1: unknown field "burst_x" in policies.p.limits[0]: the fields there are name, key,`},
		{`{policies: {p: {lease: 3, limits: [{name: a, limit: 1, window: 1s}]}}}`, `policy "p": give either limits or a single limit`},
		{`{policies: {p: {limits: []}}}`, `policy "p": limits must list at least one limit`},
	} {
		_, err := ratelimit.ParsePolicies([]byte(c.file), false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.file, err, c.want)
		}
	}
	for _, c := range []struct {
		p    ratelimit.Policy
		want string
	}{
		{multi("p", nl("a", "ip", ratelimit.FixedWindow, 1, time.Second), nl("a", "ip", ratelimit.FixedWindow, 1, time.Second)), `limits[1]: name "a" is given twice`},
		{multi("p", nl("a{", "ip", ratelimit.FixedWindow, 1, time.Second)), `limits[0]: name must be`},
		{multi("p", nl("a", "cookie", ratelimit.FixedWindow, 1, time.Second)), `limit "a": key must be "ip", "header:NAME", "const" or "path"`},
		{multi("p", nl("a", "ip", ratelimit.FixedWindow, 0, time.Second)), `limit "a": limit must be at least 1`},
	} {
		err := (ratelimit.Config{Policies: []ratelimit.Policy{c.p}}).Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
}

// TestMultiLimitFailModesAndShadow: a multi-limit policy fails open or
// closed as a whole, and a shadow one allows what it would deny, marked,
// consuming nothing.
func TestMultiLimitFailModesAndShadow(t *testing.T) {
	two := func(name string) ratelimit.Policy {
		return multi(name, nl("a", "ip", ratelimit.FixedWindow, 1, time.Minute), nl("b", "const", ratelimit.TokenBucket, 5, time.Minute))
	}
	shadow := two("shadow")
	shadow.Shadow = true
	reg := prometheus.NewRegistry()
	cfg := rlConfig(0, shadow)
	cfg.Registerer = reg
	svc, m := newTestService(t, cfg)
	p, _ := svc.Policy("shadow")
	keys := svc.MultiKeys(p, []string{"k", ratelimit.ConstKey})
	mustCheck(t, svc, ratelimit.Request{Policy: "shadow", Key: "k"})
	before := counts(m, keys)
	d := mustCheck(t, svc, ratelimit.Request{Policy: "shadow", Key: "k"})
	if !d.Allowed || !d.WouldDeny || d.Binding != "a" || d.RetryAfter != 0 {
		t.Fatalf("shadow would-deny: %+v", d)
	}
	if after := counts(m, keys); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a shadow would-deny changed the counts: %q, then %q", before, after)
	}
	if got := storetest.CounterValue(t, reg, "latchkey_ratelimit_shadow_would_deny_total", "policy", "shadow"); got != 1 {
		t.Errorf("would-deny metric %v, want 1", got)
	}

	closed := two("closed")
	closed.Fail = ratelimit.FailClosed
	cfg = rlConfig(0, two("open"), closed)
	cfg.RateLimit.Timeout = 100 * time.Millisecond
	m2, rdb := newTestRedis(t)
	svc = mustNew(t, rdb, cfg)
	m2.Close()
	d, err := svc.Check(t.Context(), ratelimit.Request{Policy: "open", Key: "k"})
	if err != nil || !d.Allowed || !d.Degraded || len(d.Limits) != 2 || d.Limits[0].Remaining != 0 || d.Limits[1].Remaining != 4 || d.Binding != "a" {
		t.Errorf("fail-open: %+v, %v; want allowed, degraded, every limit listed", d, err)
	}
	if _, err := svc.Check(t.Context(), ratelimit.Request{Policy: "closed", Key: "k"}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("fail-closed error = %v, want ErrUnavailable", err)
	}
}

// TestMultiLimitMetricsFollowReloads: a limit removed by a reload takes its
// metric series with it; the others stay.
func TestMultiLimitMetricsFollowReloads(t *testing.T) {
	reg := prometheus.NewRegistry()
	pol := multi("p", nl("a", "ip", ratelimit.FixedWindow, 5, time.Minute), nl("b", "ip", ratelimit.FixedWindow, 5, time.Minute))
	cfg := rlConfig(0, pol)
	cfg.Registerer = reg
	svc, _ := newTestService(t, cfg)
	mustCheck(t, svc, ratelimit.Request{Policy: "p", Key: "k"})
	if _, _, err := svc.SetPolicies([]ratelimit.Policy{multi("p", pol.Limits[0])}); err != nil {
		t.Fatal(err)
	}
	series := func() (n int) {
		fs, _ := reg.Gather()
		for _, f := range fs {
			if f.GetName() == "latchkey_ratelimit_limit_decisions_total" {
				n = len(f.GetMetric())
			}
		}
		return n
	}
	if n := series(); n != 4 {
		t.Errorf("%d series after removing limit b, want limit a's 4", n)
	}
	if got := storetest.CounterValue(t, reg, "latchkey_ratelimit_limit_decisions_total", "policy", "p", "limit", "a", "result", "allowed"); got != 1 {
		t.Errorf("limit a allowed %v, want 1 carried over", got)
	}
}

// allowingClient answers every script call with one allowed decision's
// reply and allocates the same whatever the call: allocation counts on it
// are Latchkey's own, not those of a store whose Lua (the embedded one's)
// allocates more or less from one call to the next. Scripts load on the
// client beneath it.
type allowingClient struct{ *redis.Client }

func (allowingClient) EvalSha(context.Context, string, []string, ...any) *redis.Cmd {
	return redis.NewCmdResult([]any{int64(1), int64(999), int64(3_600_000), int64(0)}, nil)
}

// TestOneLimitPolicyAllocatesAsTheShortForm counts the allocations of a
// decision under a limits: list of one limit against the same limit in the
// short form, by Check and by Gate: the one-limit list keeps its key, its
// Redis key and its reply off the heap as the short form does, and makes
// only the answer's Limits (which the short form's answer does not carry).
// Counts, not times, on a client that answers at once (allowingClient).
func TestOneLimitPolicyAllocatesAsTheShortForm(t *testing.T) {
	short := fixed("short", 1_000_000_000, time.Hour)
	one := multi("one", nl("per-ip", ratelimit.KeyIP, ratelimit.FixedWindow, 1_000_000_000, time.Hour))
	_, rdb := newTestRedis(t)
	svc := mustNew(t, allowingClient{rdb}, rlConfig(ratelimit.DefaultCacheSize, short, one))
	ctx := t.Context()
	src := testSource{client: "192.0.2.1", gate: true}
	allocs := func(policy string) (check, gate float64) {
		req := ratelimit.Request{Policy: policy, Key: "192.0.2.1"}
		decideCheck := func() {
			if _, err := svc.Check(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		decideGate := func() {
			if _, _, err := svc.Gate(ctx, policy, src); err != nil {
				t.Fatal(err)
			}
		}
		decideCheck() // warm up: the scripts loaded, the metrics' series made
		decideGate()
		return testing.AllocsPerRun(200, decideCheck), testing.AllocsPerRun(200, decideGate)
	}
	allocs("short")
	allocs("one")
	shortCheck, shortGate := allocs("short")
	oneCheck, oneGate := allocs("one")
	t.Logf("allocations a decision: check %.0f (short form %.0f), gate %.0f (short form %.0f)", oneCheck, shortCheck, oneGate, shortGate)
	if oneCheck > shortCheck+1 {
		t.Errorf("a one-limit policy's check allocates %.0f times, the short form's %.0f: want at most one more (the answer's Limits)", oneCheck, shortCheck)
	}
	if oneGate > shortGate+1 {
		t.Errorf("a one-limit policy's gate decision allocates %.0f times, the short form's %.0f: want at most one more (the answer's Limits)", oneGate, shortGate)
	}
	if d := mustCheck(t, svc, ratelimit.Request{Policy: "one", Key: "192.0.2.1"}); len(d.Limits) != 1 || d.Limits[0].Key != "192.0.2.1" {
		t.Errorf("one-limit decision's Limits = %+v, want the limit per-ip on key 192.0.2.1", d.Limits)
	}
}
