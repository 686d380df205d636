package ratelimit_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// waitQueuedMulti waits until n multi-limit decisions wait for a call.
func waitQueuedMulti(t *testing.T, svc *ratelimit.Service, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ratelimit.QueuedMultiDecisions(svc) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d multi-limit decisions queued, want %d", ratelimit.QueuedMultiDecisions(svc), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// wantDescending checks that the remaining counts of a limit's allowed
// decisions are exactly capacity-1, capacity-2, ... (cost 1 each), as many
// as were allowed, in any order: each admission counted once.
func wantDescending(t *testing.T, name string, remaining []int64, capacity int64) {
	t.Helper()
	got := slices.Clone(remaining)
	slices.Sort(got)
	slices.Reverse(got)
	for i, r := range got {
		if r != capacity-1-int64(i) {
			t.Errorf("%s: allowed with remaining %v, want %d down to %d", name, got, capacity-1, capacity-int64(len(got)))
			return
		}
	}
}

// TestMultiLimitDecisionsShareScriptCalls: concurrent decisions of a
// three-limit policy queued behind a call go to Redis together in one
// call, and each is counted exactly: the global limit admits exactly its
// capacity, each limit's allowed decisions count down one by one, and the
// stored counters hold exactly the admissions.
func TestMultiLimitDecisionsShareScriptCalls(t *testing.T) {
	const queued, ips, global = 59, 10, 40
	pol := multi("api",
		nl("per-ip", "ip", ratelimit.FixedWindow, 5, time.Minute),
		nl("per-key", "header:X-Api-Key", ratelimit.SlidingWindow, 1000, time.Minute),
		nl("global", "const", ratelimit.TokenBucket, global, time.Hour))
	pol.Fail = ratelimit.FailClosed
	c, m := newGatedRedis(t)
	svc := mustNew(t, c, heldConfig(nil, pol))
	first := holdFirstCall(t, svc, c, "api")
	keysOf := func(i int) []string { return []string{fmt.Sprintf("192.0.2.%d", i%ips), "k1", ratelimit.ConstKey} }
	var waiting []<-chan asyncDecision
	for i := range queued {
		waiting = append(waiting, decideAsync(t.Context(), svc, ratelimit.Request{Policy: "api", Keys: keysOf(i)}))
	}
	waitQueuedMulti(t, svc, queued)
	c.release()

	results := []asyncDecision{receive(t, first)}
	for _, ch := range waiting {
		results = append(results, receive(t, ch))
	}
	calls := c.callKeys()
	if len(calls) != 2 || len(calls[1]) != 3*queued {
		t.Fatalf("script calls by keys = %d calls, want 2: the first alone, then the %d queued together (%d keys)", len(calls), queued, 3*queued)
	}
	var allowed int
	perIP := map[string][]int64{}
	var perKey, globals []int64
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("decision %d: %v", i, r.err)
		}
		d := r.d
		if !d.Allowed {
			if d.Binding != "per-ip" && d.Binding != "global" {
				t.Errorf("decision %d denied by %q, want per-ip or global", i, d.Binding)
			}
			continue
		}
		allowed++
		perIP[d.Limits[0].Key] = append(perIP[d.Limits[0].Key], d.Limits[0].Remaining)
		if d.Limits[1].Key == "k1" {
			perKey = append(perKey, d.Limits[1].Remaining)
		}
		globals = append(globals, d.Limits[2].Remaining)
	}
	// Every address may pass 5 (51 in all, with the first's): the global
	// limit binds, whatever order the batch has.
	if allowed != global {
		t.Errorf("allowed %d decisions, want exactly the global limit's %d", allowed, global)
	}
	storetest.WantCountdown(t, "global", globals, global, 1)
	wantDescending(t, "per-key k1", perKey, 1000)
	p, _ := svc.Policy("api")
	for ip, rem := range perIP {
		if ip == "first" {
			continue
		}
		wantDescending(t, "per-ip "+ip, rem, 5)
		key := svc.MultiKeys(p, []string{ip, "k1", ratelimit.ConstKey})[0]
		if got, _ := m.Get(key); got != fmt.Sprint(len(rem)) {
			t.Errorf("per-ip %s stored %q, want its %d admissions", ip, got, len(rem))
		}
	}
}

// TestMultiLimitBatchKeepsEachDecisionToItself: in one batch, a decision
// that one limit denies counts nothing in any limit, and one whose key
// holds another type fails alone with a script error, while the allowed
// decisions beside them count in every limit.
func TestMultiLimitBatchKeepsEachDecisionToItself(t *testing.T) {
	pol := multi("api",
		nl("per-ip", "ip", ratelimit.FixedWindow, 1, time.Minute),
		nl("per-key", "header:X-Api-Key", ratelimit.FixedWindow, 10, time.Minute),
		nl("global", "const", ratelimit.FixedWindow, 10, time.Minute))
	pol.Fail = ratelimit.FailClosed
	c, m := newGatedRedis(t)
	svc := mustNew(t, c, heldConfig(nil, pol))
	p, _ := svc.Policy("api")
	keys := func(ip string) []string { return []string{ip, "k", ratelimit.ConstKey} }
	rkeys := func(ip string) []string { return svc.MultiKeys(p, keys(ip)) }
	// Address b has spent its one; address bad's counter is a list.
	mustSet(m, rkeys("b")[0], "1")
	m.SetTTL(rkeys("b")[0], time.Minute)
	if _, err := m.Push(rkeys("bad")[0], "v"); err != nil {
		t.Fatal(err)
	}
	first := holdFirstCall(t, svc, c, "api") // address and key "first": counts 1 globally
	var chans []<-chan asyncDecision
	for i, ip := range []string{"a", "b", "bad", "c"} {
		chans = append(chans, decideAsync(t.Context(), svc, ratelimit.Request{Policy: "api", Keys: keys(ip)}))
		waitQueuedMulti(t, svc, i+1) // in this order in the batch
	}
	c.release()
	if r := receive(t, first); r.err != nil || !r.d.Allowed {
		t.Fatalf("first decision: %+v, %v; want allowed", r.d, r.err)
	}
	a, b, bad, cc := receive(t, chans[0]), receive(t, chans[1]), receive(t, chans[2]), receive(t, chans[3])
	if calls := c.callKeys(); len(calls) != 2 || len(calls[1]) != 12 {
		t.Errorf("script calls by keys = %v, want the four queued decisions in one call", calls)
	}
	if b.err != nil || b.d.Allowed || b.d.Binding != "per-ip" || !b.d.Limits[1].Allowed || !b.d.Limits[2].Allowed {
		t.Errorf("address b: %+v, %v; want denied by per-ip alone", b.d, b.err)
	}
	if bad.err == nil || errors.Is(bad.err, store.ErrUnavailable) {
		t.Errorf("address bad (a list): %+v, %v; want a script error (not unavailable)", bad.d, bad.err)
	}
	// a and c count in every limit, b and bad in none: c sees a's counts
	// only.
	for _, tc := range []struct {
		name      string
		r         asyncDecision
		key, glob int64
	}{{"a", a, 9, 8}, {"c", cc, 8, 7}} {
		d := tc.r.d
		if tc.r.err != nil || !d.Allowed || d.Limits[0].Remaining != 0 || d.Limits[1].Remaining != tc.key || d.Limits[2].Remaining != tc.glob {
			t.Errorf("address %s: %+v, %v; want allowed with 0, %d and %d left", tc.name, d, tc.r.err, tc.key, tc.glob)
		}
	}
	for key, want := range map[string]string{
		rkeys("a")[0]: "1", rkeys("b")[0]: "1", rkeys("c")[0]: "1",
		rkeys("a")[1]: "2", rkeys("a")[2]: "3", // per-key k: a and c; global: first, a and c
	} {
		if got, _ := m.Get(key); got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
	if l, err := m.List(rkeys("bad")[0]); err != nil || len(l) != 1 {
		t.Errorf("the list at bad's key: %v, %v; want it as it was", l, err)
	}
}

// TestMultiLimitBatchSendsEachPolicysLimitsOnce: decisions of two
// multi-limit policies, interleaved in one batch, go in one call that
// carries each policy's limits once and each decision's policy and cost,
// and each decision counts under its own policy's limits.
func TestMultiLimitBatchSendsEachPolicysLimitsOnce(t *testing.T) {
	two := multi("two",
		nl("per-ip", "ip", ratelimit.FixedWindow, 100, time.Minute),
		nl("global", "const", ratelimit.FixedWindow, 10, time.Minute))
	three := multi("three",
		nl("per-ip", "ip", ratelimit.FixedWindow, 100, time.Minute),
		nl("per-key", "header:X-Api-Key", ratelimit.SlidingWindow, 100, time.Minute),
		nl("global", "const", ratelimit.TokenBucket, 20, time.Hour))
	two.Fail, three.Fail = ratelimit.FailClosed, ratelimit.FailClosed
	c, _ := newGatedRedis(t)
	svc := mustNew(t, c, heldConfig(nil, two, three))
	first := holdFirstCall(t, svc, c, "two") // counts 1 in two's global limit
	var chans []<-chan asyncDecision
	for i, policy := range []string{"two", "three", "two", "three"} {
		chans = append(chans, decideAsync(t.Context(), svc, ratelimit.Request{Policy: policy, Key: fmt.Sprint("k", i)}))
		waitQueuedMulti(t, svc, i+1) // in this order in the batch
	}
	c.release()
	if r := receive(t, first); r.err != nil || !r.d.Allowed {
		t.Fatalf("first decision: %+v, %v; want allowed", r.d, r.err)
	}
	var globals []int64
	for i, ch := range chans {
		r := receive(t, ch)
		if r.err != nil || !r.d.Allowed || r.d.Limits[0].Remaining != 99 {
			t.Fatalf("decision %d: %+v, %v; want allowed, its per-ip limit counting 1", i, r.d, r.err)
		}
		globals = append(globals, r.d.Limits[len(r.d.Limits)-1].Remaining)
	}
	// two's global counts on from the first decision, three's from none.
	if want := []int64{8, 19, 7, 18}; !slices.Equal(globals, want) {
		t.Errorf("global remaining by decision = %v, want %v", globals, want)
	}
	calls, argv := c.callKeys(), c.callArgs()
	if len(calls) != 2 || len(calls[1]) != 2+3+2+3 {
		t.Fatalf("script calls by keys = %v, want the four queued decisions in one call (10 keys)", calls)
	}
	// ARGV: the count of sets, each set once (its n, then 5 entries a
	// limit), then a set and a cost per decision.
	if got, want := len(argv[1]), 1+(1+5*2)+(1+5*3)+2*4; got != want || fmt.Sprint(argv[1][0]) != "2" {
		t.Errorf("the batch's ARGV: %d entries, starting %v; want %d, starting 2 (sets)", got, argv[1][0], want)
	}
	if got := fmt.Sprint(argv[1][len(argv[1])-8:]...); got != fmt.Sprint(1, 1, 2, 1, 1, 1, 2, 1) {
		t.Errorf("the decisions' entries = %s, want set 1, 2, 1, 2, each at cost 1", got)
	}
}

// TestMultiBatchScriptDecidesEachDecision runs ratelimit_multi_batch.lua
// on the embedded store with three decisions: the first allowed, the
// second's key a list (it fails alone), the third denied by a limit the
// first counted in, writing nothing to its other keys.
func TestMultiBatchScriptDecidesEachDecision(t *testing.T) {
	m, rdb := newTestRedis(t)
	if _, err := m.Push("list", "v"); err != nil {
		t.Fatal(err)
	}
	keys := []string{"a1", "a2", "list", "a1", "c2", "c3", "d1", "a2"}
	args := []any{
		3,                                             // three sets of limits:
		2, "fw", 2, 60000, 0, 0, "tb", 5, 60000, 5, 0, // 1: a fixed window of 2 a minute, a token bucket
		1, "fw", 5, 60000, 0, 0, // 2: a fixed window of 5
		3, "fw", 2, 60000, 0, 0, "sw", 5, 60000, 0, 0, "tb", 5, 60000, 5, 0, // 3: all three
		1, 1, // decision 1, set 1: a1 and a2
		2, 1, // decision 2, set 2: on a list
		3, 2, // decision 3, set 3, cost 2: a1 has 1 left
		1, 1, // decision 4, set 1 again: d1 and a2, a2 counting on from decision 1
	}
	res, err := redis.NewScript(lua.Source("ratelimit_multi_batch")).Run(t.Context(), rdb, keys, args...).Slice()
	if err != nil || len(res) != 5*8 {
		t.Fatalf("reply %v, %v; want 40 entries", res, err)
	}
	if want := []any{int64(1), int64(1), int64(60000), int64(0), int64(1), int64(1), int64(3)}; !slices.Equal(res[30:37], want) {
		t.Errorf("decision 4: %v, want both limits counted, 1 and 3 left", res[30:40])
	}
	if want := []any{int64(1), int64(1), int64(60000), int64(0), int64(1), int64(1), int64(4)}; !slices.Equal(res[0:7], want) {
		t.Errorf("decision 1: %v, want both limits counted, 1 and 4 left", res[0:10])
	}
	if msg, _ := res[11].(string); res[10] != int64(-1) || msg == "" || res[12] != int64(0) || res[14] != int64(0) {
		t.Errorf("decision 2 (a list): %v, want -1, the error's text, then zeros", res[10:15])
	}
	if res[15] != int64(0) || res[16] != int64(1) || res[20] != int64(2) || res[25] != int64(2) {
		t.Errorf("decision 3: %v, want denied by a1 (1 left), the others allowing but blocked", res[15:30])
	}
	if got, _ := m.Get("a1"); got != "1" {
		t.Errorf("a1 = %q, want 1: decision 1's alone", got)
	}
	for _, k := range []string{"c2", "c3"} {
		if m.Exists(k) {
			t.Errorf("%s exists: a denied decision wrote it", k)
		}
	}
}
