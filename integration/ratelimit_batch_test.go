package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/redis/go-redis/v9"
)

// Each rate-limit script decides several keys in one call, as the server
// batches concurrent decisions; a key of another type fails alone, with
// Redis's error text (Redis raises a table where the embedded store raises
// a string).
func TestRateLimitScriptsKeepAKeysErrorToItself(t *testing.T) {
	rdb, _ := newRedis(t)
	prefix := uniquePrefix()
	for _, tc := range []struct {
		name string
		src  string
		args []any
	}{
		{"fixed_window", lua.Source("ratelimit_fixed_window"), []any{5, 60000, 1, 5, 60000, 1, 5, 60000, 2}},
		{"sliding_window", lua.Source("ratelimit_sliding_window"), []any{5, 60000, 1, 5, 60000, 1, 5, 60000, 2}},
		{"token_bucket", lua.Source("ratelimit_token_bucket"), []any{5, 60000, 5, 1, 5, 60000, 5, 1, 5, 60000, 5, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tag := prefix + "{" + tc.name + "}" // one slot: the script runs on a cluster too
			keys := []string{tag + ":a", tag + ":list", tag + ":c"}
			if err := rdb.RPush(t.Context(), keys[1], "v").Err(); err != nil {
				t.Fatal(err)
			}
			res, err := redis.NewScript(tc.src).Run(t.Context(), rdb, keys, tc.args...).Slice()
			if err != nil || len(res) != 12 {
				t.Fatalf("reply %v, %v; want 12 entries", res, err)
			}
			if res[0] != int64(1) || res[1] != int64(4) || res[8] != int64(1) || res[9] != int64(3) {
				t.Errorf("first and third keys: %v and %v, want allowed with 4 and 3 remaining", res[0:4], res[8:12])
			}
			if msg, _ := res[5].(string); res[4] != int64(-1) || len(msg) < 9 || msg[:9] != "WRONGTYPE" {
				t.Errorf("the list: %v, want -1 and Redis's WRONGTYPE error", res[4:8])
			}
		})
	}
}

// ratelimit_multi_batch.lua decides each multi-limit decision of a call on
// its own: one whose key is a list fails alone with Redis's WRONGTYPE text
// and writes nothing; one denied by a limit that an earlier decision of
// the call counted in writes nothing to its other limits.
func TestMultiBatchScriptKeepsEachDecisionToItself(t *testing.T) {
	rdb, _ := newRedis(t)
	tag := uniquePrefix() + "{multi_batch}" // one slot: the script runs on a cluster too
	keys := []string{tag + ":a1", tag + ":a2", tag + ":list", tag + ":b2", tag + ":a1", tag + ":c2", tag + ":c3"}
	if err := rdb.RPush(t.Context(), keys[2], "v").Err(); err != nil {
		t.Fatal(err)
	}
	res, err := redis.NewScript(lua.Source("ratelimit_multi_batch")).Run(t.Context(), rdb, keys,
		3,                                             // three sets of limits, then each decision's set and cost
		2, "fw", 2, 60000, 0, 0, "tb", 5, 60000, 5, 0, // 1: a fixed window of 2 a minute, a token bucket
		2, "fw", 5, 60000, 0, 0, "sw", 5, 60000, 0, 0, // 2: a fixed window of 5, a sliding window
		3, "fw", 2, 60000, 0, 0, "sw", 5, 60000, 0, 0, "tb", 5, 60000, 5, 0, // 3: all three
		1, 1, // allowed: a1 (2 a minute) and a2 count 1
		2, 1, // a list, then b2: fails alone
		3, 2, // cost 2: a1 has 1 left
	).Slice()
	if err != nil || len(res) != 5*7 {
		t.Fatalf("reply %v, %v; want 35 entries", res, err)
	}
	if !slices.Equal(res[0:7], []any{int64(1), int64(1), int64(60000), int64(0), int64(1), int64(1), int64(4)}) {
		t.Errorf("first decision: %v, want both limits counted, 1 and 4 left", res[0:10])
	}
	if msg, _ := res[11].(string); res[10] != int64(-1) || !strings.HasPrefix(msg, "WRONGTYPE") || res[19] != int64(0) {
		t.Errorf("second decision (a list): %v, want -1, Redis's WRONGTYPE error, then zeros", res[10:20])
	}
	if res[20] != int64(0) || res[21] != int64(1) || res[25] != int64(2) || res[30] != int64(2) {
		t.Errorf("third decision: %v, want denied by a1 (1 left), the others allowing but blocked", res[20:35])
	}
	if n, err := rdb.Exists(t.Context(), keys[3], keys[5], keys[6]).Result(); err != nil || n != 0 {
		t.Errorf("b2, c2 and c3: %d exist (%v), want none: neither failed nor denied decisions write", n, err)
	}
	if v, err := rdb.Get(t.Context(), keys[0]).Result(); err != nil || v != "1" {
		t.Errorf("a1 = %q (%v), want 1: the first decision's alone", v, err)
	}
}

// Many concurrent checks on a few keys, batched into shared script calls,
// allow exactly each key's share of the limit and answer each caller for its
// own key: key i costs i+1, so each allowed check leaves a remaining that
// only its key can. The policy fails closed and decisions have a minute, so
// a loaded machine can neither pass a degraded answer (allowed uncounted)
// for an admission nor fail a decision for being slow.
func TestRateLimitConcurrentChecksCountExactly(t *testing.T) {
	burst := policy("burst", ratelimit.FixedWindow, 60, time.Minute)
	burst.Fail = ratelimit.FailClosed
	e := newTestEnv(t, withPolicies(burst), withServiceConfig(func(s *serviceConfig) {
		s.RateLimit.Timeout, s.OpTimeout = time.Minute, time.Minute
	}))
	const keys, perKey = 4, 90
	var mu sync.Mutex
	remaining := make([][]int64, keys)
	var wg sync.WaitGroup
	for i := range keys * perKey {
		wg.Go(func() {
			k := i % keys
			r, d := e.check(t, fmt.Sprintf(`{"policy":"burst","key":"user-%d","cost":%d}`, k, k+1))
			switch {
			case d.Degraded:
				t.Errorf("check for user-%d: %d %s, want a decision Redis made", k, r.Status, r.Body)
			case r.Status == http.StatusOK:
				mu.Lock()
				remaining[k] = append(remaining[k], d.Remaining)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for k := range keys {
		storetest.WantCountdown(t, fmt.Sprintf("user-%d", k), remaining[k], 60, int64(k+1))
	}
}

// While Redis does not answer (CLIENT PAUSE), concurrent decisions queued
// behind a stuck call each end within the decision timeout: fail-open
// policies allow them marked degraded, fail-closed ones answer 503. Once
// Redis answers again, decisions count again (the calls that timed out may
// still have run when the pause ended, as any timed-out command may).
func TestRateLimitDecisionsWhileRedisPaused(t *testing.T) {
	_, url := startRedisContainer(t)
	open := policy("open", ratelimit.FixedWindow, 1000, time.Minute)
	closed := policy("closed", ratelimit.FixedWindow, 1000, time.Minute)
	closed.Fail = ratelimit.FailClosed
	const decisionTimeout = 200 * time.Millisecond
	e := newTestEnv(t, withRedis(url), withServerClient(outageTimeout), withClient(serverClients[1].wrap), withPolicies(open, closed),
		withServiceConfig(func(s *serviceConfig) { s.RateLimit.Timeout = decisionTimeout }))
	if r := e.do(t, "GET", "/v1/ratelimit/gate/closed", ""); r.Status != http.StatusOK {
		t.Fatalf("before the pause: %d %s", r.Status, r.Body)
	}

	pause := 3 * time.Second
	if err := e.RDB.Do(t.Context(), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	paused := time.Now()
	bound := hangFactor * decisionTimeout
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			p := []string{"open", "closed"}[i%2]
			start := time.Now()
			r := e.do(t, "GET", "/v1/ratelimit/gate/"+p, "")
			if took := time.Since(start); took > bound {
				t.Errorf("%s: answered after %s with Redis paused, want under %s", p, took, bound)
			}
			switch {
			case p == "open" && (r.Status != http.StatusOK || r.Header.Get("Latchkey-RateLimit-Degraded") == ""):
				t.Errorf("fail-open policy: %d %v, want 200 marked degraded", r.Status, r.Header)
			case p == "closed":
				wantProblem(t, r, http.StatusServiceUnavailable, "store-unavailable")
			}
		})
	}
	wg.Wait()
	if time.Since(paused) >= pause {
		t.Fatal("the pause ended before the decisions were answered; the test proves nothing")
	}

	deadline := time.Now().Add(pause + 5*time.Second)
	for {
		r := e.do(t, "GET", "/v1/ratelimit/gate/closed", "", "Accept", "application/json")
		if r.Status == http.StatusOK {
			before := r.decision(t).Remaining
			next := e.do(t, "GET", "/v1/ratelimit/gate/closed", "", "Accept", "application/json")
			if next.Status != http.StatusOK || next.decision(t).Remaining != before-1 {
				t.Errorf("after the pause: %d %s, want allowed with remaining %d", next.Status, next.Body, before-1)
			}
			break
		}
		wantProblem(t, r, http.StatusServiceUnavailable, "store-unavailable")
		if time.Now().After(deadline) {
			t.Fatal("decisions did not come back after Redis did")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pausedScriptCalls counts the script calls Redis holds (CLIENT PAUSE).
func pausedScriptCalls(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	list, err := rdb.ClientList(t.Context()).Result()
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	n := 0
	for line := range strings.Lines(list) {
		f := strings.Fields(line)
		if slices.Contains(f, "cmd=evalsha") && slices.ContainsFunc(f, func(s string) bool {
			return strings.HasPrefix(s, "flags=") && strings.Contains(s, "b")
		}) {
			n++
		}
	}
	return n
}

// While Redis holds script calls (CLIENT PAUSE WRITE), the decisions queued
// behind them are taken by further calls (the stall path), so that three
// calls are out at once; once Redis answers, every check, whichever call it
// rode in, is counted once on the real store and answered for its own key:
// key i costs i+1, so each allowed check leaves a remaining that only its
// key can. The decision timeout (16s, a stall of 2s) outlasts the pause, and
// the policy fails closed, so no answer is a degraded one.
func TestRateLimitChecksBehindStalledCallsCountExactly(t *testing.T) {
	_, url := startRedisContainer(t)
	for _, sc := range serverClients {
		t.Run(sc.name, func(t *testing.T) {
			p := policy("stall", ratelimit.FixedWindow, 60, time.Minute)
			p.Fail = ratelimit.FailClosed
			const decisionTimeout = 16 * time.Second
			e := newTestEnv(t, withRedis(url), withServerClient(decisionTimeout), withClient(sc.wrap), withPolicies(p),
				withServiceConfig(func(s *serviceConfig) {
					s.RateLimit.Timeout, s.RateLimit.Batch = decisionTimeout, 16
				}))
			if err := e.RDB.Do(t.Context(), "CLIENT", "PAUSE", time.Minute.Milliseconds(), "WRITE").Err(); err != nil {
				t.Fatalf("CLIENT PAUSE: %v", err)
			}
			unpause := func() {
				if err := e.RDB.Do(context.Background(), "CLIENT", "UNPAUSE").Err(); err != nil {
					t.Errorf("CLIENT UNPAUSE: %v", err)
				}
			}
			t.Cleanup(unpause)
			paused := time.Now()

			const keys, perKey = 4, 64
			type answer struct {
				k int
				r response
			}
			answers := make(chan answer, keys*perKey)
			var wg sync.WaitGroup
			for i := range keys * perKey {
				wg.Go(func() {
					k := i % keys
					body := fmt.Sprintf(`{"policy":"stall","key":"user-%d","cost":%d}`, k, k+1)
					answers <- answer{k, e.do(t, "POST", "/v1/ratelimit/check", body)}
				})
			}
			for pausedScriptCalls(t, e.RDB) < 3 {
				if time.Since(paused) > decisionTimeout/2 {
					t.Fatalf("%d script calls held after %s, want 3: the stall path never took the queue",
						pausedScriptCalls(t, e.RDB), time.Since(paused))
				}
				time.Sleep(10 * time.Millisecond)
			}
			unpause()
			wg.Wait()
			close(answers)

			remaining := make([][]int64, keys)
			for a := range answers {
				switch a.r.Status {
				case http.StatusOK:
					d := a.r.decision(t)
					if d.Degraded || d.Key != fmt.Sprintf("user-%d", a.k) {
						t.Errorf("check for user-%d: %s, want a decision Redis made for its key", a.k, a.r.Body)
					}
					remaining[a.k] = append(remaining[a.k], d.Remaining)
				case http.StatusTooManyRequests:
				default:
					t.Errorf("check for user-%d: %d %s", a.k, a.r.Status, a.r.Body)
				}
			}
			for k := range keys {
				cost := int64(k + 1)
				storetest.WantCountdown(t, fmt.Sprintf("user-%d", k), remaining[k], 60, cost)
				counter, err := e.RDB.Get(t.Context(), fmt.Sprintf("%srl:fw:stall:user-%d", e.Prefix, k)).Int64()
				if wantCount := 60 - 60%cost; err != nil || counter != wantCount {
					t.Errorf("user-%d's counter in Redis = %d, %v; want %d", k, counter, err, wantCount)
				}
			}
		})
	}
}
