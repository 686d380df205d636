package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// gatedClient holds its first script call until release is called (or the
// call's context ends), so that the decisions behind it queue up, and
// records the keys and the ARGV of every call that reaches it.
type gatedClient struct {
	*redis.Client
	mu      sync.Mutex
	calls   [][]string
	argv    [][]any
	entered chan struct{} // closed when the first call is held
	gate    chan struct{}
	// deaf makes the held call wait for release alone, as a client that puts
	// no deadline on the socket would.
	deaf bool
}

func newGatedClient(t *testing.T) *gatedClient {
	t.Helper()
	c, _ := newGatedRedis(t)
	return c
}

// newGatedRedis is newGatedClient, also returning the miniredis beneath it.
func newGatedRedis(t *testing.T) (*gatedClient, *miniredis.Miniredis) {
	t.Helper()
	m, rdb := newTestRedis(t)
	c := &gatedClient{Client: rdb, entered: make(chan struct{}), gate: make(chan struct{})}
	t.Cleanup(c.release)
	return c, m
}

func (c *gatedClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c.mu.Lock()
	c.calls = append(c.calls, slices.Clone(keys))
	c.argv = append(c.argv, slices.Clone(args))
	first := len(c.calls) == 1
	c.mu.Unlock()
	if first {
		close(c.entered)
		done := ctx.Done()
		if c.deaf {
			done = nil
		}
		select {
		case <-c.gate:
		case <-done:
			return redis.NewCmdResult(nil, ctx.Err())
		}
	}
	return c.Client.EvalSha(ctx, sha, keys, args...)
}

func (c *gatedClient) release() {
	select {
	case <-c.gate:
	default:
		close(c.gate)
	}
}

// callArgs returns the ARGV of each script call so far.
func (c *gatedClient) callArgs() [][]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.argv)
}

// callKeys returns the keys of each script call so far.
func (c *gatedClient) callKeys() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// decideAsync runs Check in a goroutine; its result arrives on the
// returned channel.
type asyncDecision struct {
	d   ratelimit.Decision
	err error
}

func decideAsync(ctx context.Context, svc *ratelimit.Service, req ratelimit.Request) <-chan asyncDecision {
	ch := make(chan asyncDecision, 1)
	go func() {
		d, err := svc.Check(ctx, req)
		ch <- asyncDecision{d, err}
	}()
	return ch
}

// holdFirstCall sends one decision (key "first") and waits until its script
// call is held by c.
func holdFirstCall(t *testing.T, svc *ratelimit.Service, c *gatedClient, policy string) <-chan asyncDecision {
	t.Helper()
	first := decideAsync(t.Context(), svc, ratelimit.Request{Policy: policy, Key: "first"})
	select {
	case <-c.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first decision's script call never reached Redis")
	}
	return first
}

// waitQueued waits until n decisions of alg wait for a call.
func waitQueued(t *testing.T, svc *ratelimit.Service, alg ratelimit.Algorithm, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ratelimit.QueuedDecisions(svc, alg) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d decisions queued, want %d", ratelimit.QueuedDecisions(svc, alg), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// heldConfig has the policies ps, and a decision timeout long enough (20s,
// so a stall of 2.5s: see decisionBatcher) that a held call keeps the
// decisions behind it queued for as long as a test needs, adjusted by adjust.
func heldConfig(adjust func(*ratelimit.Config), ps ...ratelimit.Policy) config {
	cfg := rlConfig(0, ps...)
	cfg.RateLimit.Timeout = 20 * time.Second
	if adjust != nil {
		adjust(&cfg.RateLimit)
	}
	return cfg
}

// failClosed is policy "p", 10 a minute, failing closed: a decision that
// cannot be made is an error.
func failClosed() ratelimit.Policy {
	p := fixed("p", 10, time.Minute)
	p.Fail = ratelimit.FailClosed
	return p
}

func receive(t *testing.T, ch <-chan asyncDecision) asyncDecision {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no decision within 10s")
		return asyncDecision{}
	}
}

// TestDecisionsQueuedBehindACallShareTheNext: decisions that arrive while a
// call is out go to Redis together in the next call, and each caller gets
// its own answer.
func TestDecisionsQueuedBehindACallShareTheNext(t *testing.T) {
	for _, p := range []ratelimit.Policy{fixed("p", 100, time.Minute), sliding("p", 100, time.Minute),
		bucket("p", 100, time.Minute, 100)} {
		t.Run(string(p.Algorithm), func(t *testing.T) {
			c := newGatedClient(t)
			svc := mustNew(t, c, heldConfig(nil, p))
			first := holdFirstCall(t, svc, c, "p")
			var waiting []<-chan asyncDecision
			for i := range 5 {
				// Key k<i> costs i+1, so each answer is told apart by its remaining.
				waiting = append(waiting, decideAsync(t.Context(), svc,
					ratelimit.Request{Policy: "p", Key: fmt.Sprintf("k%d", i), Cost: int64(i + 1)}))
			}
			waitQueued(t, svc, p.Algorithm, 5)
			c.release()
			if r := receive(t, first); r.err != nil || !r.d.Allowed || r.d.Remaining != 99 {
				t.Errorf("first decision: %+v, %v; want allowed, remaining 99", r.d, r.err)
			}
			for i, ch := range waiting {
				r := receive(t, ch)
				if r.err != nil || !r.d.Allowed || r.d.Key != fmt.Sprintf("k%d", i) || r.d.Remaining != int64(100-i-1) {
					t.Errorf("decision %d: %+v, %v; want allowed for k%d, remaining %d", i, r.d, r.err, i, 100-i-1)
				}
			}
			calls := c.callKeys()
			if len(calls) != 2 || len(calls[1]) != 5 {
				t.Errorf("script calls by keys = %v, want the first alone, then the five queued together", calls)
			}
		})
	}
}

// TestDecisionBatchKeepsAKeysErrorToItself: a key holding another type fails
// its own decision with a script error; the decisions beside it in the same
// call are made as usual.
func TestDecisionBatchKeepsAKeysErrorToItself(t *testing.T) {
	c := newGatedClient(t)
	svc := mustNew(t, c, heldConfig(nil, fixed("p", 10, time.Minute)))
	if err := c.RPush(t.Context(), "latchkey:rl:fw:p:bad", "v").Err(); err != nil {
		t.Fatal(err)
	}
	first := holdFirstCall(t, svc, c, "p")
	good1 := decideAsync(t.Context(), svc, ratelimit.Request{Policy: "p", Key: "good1"})
	waitQueued(t, svc, ratelimit.FixedWindow, 1)
	bad := decideAsync(t.Context(), svc, ratelimit.Request{Policy: "p", Key: "bad"})
	waitQueued(t, svc, ratelimit.FixedWindow, 2)
	good2 := decideAsync(t.Context(), svc, ratelimit.Request{Policy: "p", Key: "good2", Cost: 2})
	waitQueued(t, svc, ratelimit.FixedWindow, 3)
	c.release()
	receive(t, first)
	if r := receive(t, bad); r.err == nil || errors.Is(r.err, store.ErrUnavailable) || r.d.Allowed {
		t.Errorf("decision on a list key: %+v, %v; want a script error (not unavailable)", r.d, r.err)
	}
	for name, want := range map[string]struct {
		ch        <-chan asyncDecision
		remaining int64
	}{"good1": {good1, 9}, "good2": {good2, 8}} {
		if r := receive(t, want.ch); r.err != nil || !r.d.Allowed || r.d.Remaining != want.remaining {
			t.Errorf("%s beside it: %+v, %v; want allowed, remaining %d", name, r.d, r.err, want.remaining)
		}
	}
	if calls := c.callKeys(); len(calls) != 2 || len(calls[1]) != 3 {
		t.Errorf("script calls by keys = %v, want the three queued decisions in one call", calls)
	}
}

// TestDecisionScriptsDecideEachKey calls each rate-limit script with three
// keys, the second a list: the reply has four entries per key, -1
// and the error's text for the second.
func TestDecisionScriptsDecideEachKey(t *testing.T) {
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
			_, rdb := newTestRedis(t)
			if err := rdb.RPush(t.Context(), "b", "v").Err(); err != nil {
				t.Fatal(err)
			}
			res, err := redis.NewScript(tc.src).Run(t.Context(), rdb, []string{"a", "b", "c"}, tc.args...).Slice()
			if err != nil || len(res) != 12 {
				t.Fatalf("reply %v, %v; want 12 entries", res, err)
			}
			if res[0] != int64(1) || res[1] != int64(4) || res[8] != int64(1) || res[9] != int64(3) {
				t.Errorf("keys a and c: %v and %v, want allowed with 4 and 3 remaining", res[0:4], res[8:12])
			}
			if msg, _ := res[5].(string); res[4] != int64(-1) || msg == "" {
				t.Errorf("key b (a list): %v, want -1 and the error's text", res[4:8])
			}
		})
	}
}

// TestTokenBucketBatchTakesEachDecisionsOwnLimit: in one call of the token
// bucket's script, decisions of different limits, bursts and costs, one
// after another, are each decided under their own, as alone: what the
// script derives from a decision's limit is not carried to the next.
func TestTokenBucketBatchTakesEachDecisionsOwnLimit(t *testing.T) {
	_, rdb := newTestRedis(t)
	res, err := redis.NewScript(lua.Source("ratelimit_token_bucket")).Run(t.Context(), rdb,
		[]string{"a", "b", "c", "d", "e"},
		5, 60000, 5, 1, // a: 5 a minute, cost 1
		1000, 60000, 1000, 1, // b: 1,000 a minute
		5, 60000, 5, 2, // c: 5 a minute, cost 2
		5, 60000, 3, 2, // d: a burst of 3, cost 2
		5, 60000, 5, 1, // e: as a
	).Slice()
	if err != nil || len(res) != 20 {
		t.Fatalf("reply %v, %v; want 20 entries", res, err)
	}
	for i, want := range []int64{4, 999, 3, 1, 4} {
		if res[4*i] != int64(1) || res[4*i+1] != want {
			t.Errorf("decision %d: %v, want allowed with %d remaining", i+1, res[4*i:4*i+4], want)
		}
	}
}

// TestDecisionCallerThatLeavesIsNotSent: a caller whose context ends while
// its decision is queued gets its context's error at once, and its decision
// is not sent (it spends nothing).
func TestDecisionCallerThatLeavesIsNotSent(t *testing.T) {
	c := newGatedClient(t)
	svc := mustNew(t, c, heldConfig(nil, fixed("p", 10, time.Minute)))
	first := holdFirstCall(t, svc, c, "p")
	ctx, cancel := context.WithCancel(t.Context())
	gone := decideAsync(ctx, svc, ratelimit.Request{Policy: "p", Key: "gone"})
	stays := decideAsync(t.Context(), svc, ratelimit.Request{Policy: "p", Key: "stays"})
	waitQueued(t, svc, ratelimit.FixedWindow, 2)
	cancel()
	if r := receive(t, gone); !errors.Is(r.err, context.Canceled) {
		t.Errorf("caller gone: %+v, %v; want context.Canceled", r.d, r.err)
	}
	c.release()
	receive(t, first)
	if r := receive(t, stays); r.err != nil || !r.d.Allowed {
		t.Errorf("decision beside it: %+v, %v; want allowed", r.d, r.err)
	}
	if calls := c.callKeys(); len(calls) != 2 || !slices.Equal(calls[1], []string{"latchkey:rl:fw:p:stays"}) {
		t.Errorf("script calls by keys = %v, want the second without the gone caller's key", calls)
	}
	if n, err := c.Exists(t.Context(), "latchkey:rl:fw:p:gone").Result(); err != nil || n != 0 {
		t.Errorf("gone caller's key exists = %d, %v; want 0", n, err)
	}
}

// TestDecisionsAreNotHeldUpByAStalledCall: while a call is stuck (Redis
// slow for it), the decisions queued behind it go in another call once the
// stuck one has been out for the stall time, and are answered in time; the
// stuck call's own decision fails at its deadline.
func TestDecisionsAreNotHeldUpByAStalledCall(t *testing.T) {
	c := newGatedClient(t)
	c.deaf = true
	cfg := rlConfig(0, failClosed())
	cfg.RateLimit.Timeout = 4 * time.Second // a stall of 500ms
	svc := mustNew(t, c, cfg)
	first := holdFirstCall(t, svc, c, "p")
	queued := decideAsync(t.Context(), svc, ratelimit.Request{Policy: "p", Key: "queued"})
	if r := receive(t, queued); r.err != nil || !r.d.Allowed {
		t.Errorf("decision queued behind a stuck call: %+v, %v; want allowed", r.d, r.err)
	}
	if r := receive(t, first); !errors.Is(r.err, store.ErrUnavailable) {
		t.Errorf("the stuck call's decision: %+v, %v; want ErrUnavailable", r.d, r.err)
	}
	if calls := c.callKeys(); len(calls) != 2 || !slices.Equal(calls[1], []string{"latchkey:rl:fw:p:queued"}) {
		t.Errorf("script calls by keys = %v, want the stuck one, then the queued decision in a call of its own", calls)
	}
}

// TestDecisionWaitEndsAtItsDeadline: a caller stops waiting at its
// deadline even when the script call it rides in does not end then (the
// call is held until the caller has its answer), and the failed decision
// counts once among the Redis errors, also once that call has ended.
func TestDecisionWaitEndsAtItsDeadline(t *testing.T) {
	c := newGatedClient(t)
	c.deaf = true
	reg := prometheus.NewRegistry()
	cfg := rlConfig(0, failClosed())
	cfg.RateLimit.Timeout = 200 * time.Millisecond
	cfg.Registerer = reg
	svc := mustNew(t, c, cfg)
	// No wait for the call to reach Redis: on a busy machine the sender may
	// start after the deadline, and the decision is then answered unsent,
	// which must look the same to its caller.
	first := decideAsync(t.Context(), svc, ratelimit.Request{Policy: "p", Key: "first"})
	if r := receive(t, first); !errors.Is(r.err, store.ErrUnavailable) {
		t.Errorf("decision in a call that outlasts its deadline: %+v, %v; want ErrUnavailable", r.d, r.err)
	}
	c.release()
	waitSendersDone(t, svc, ratelimit.FixedWindow)
	if calls := c.callKeys(); len(calls) > 1 {
		t.Errorf("script calls by keys = %v, want at most the held one", calls)
	}
	if got := storetest.CounterValue(t, reg, "latchkey_redis_errors_total", "op", "ratelimit_fixed_window", "kind", "unavailable"); got != 1 {
		t.Errorf("unavailable errors counted = %v, want 1 for the one failed decision", got)
	}
}

// waitSendersDone waits until no call of alg is out: every call made so
// far has ended and its decisions were answered.
func waitSendersDone(t *testing.T, svc *ratelimit.Service, alg ratelimit.Algorithm) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for ratelimit.Senders(svc, alg) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls still out after 10s, want none", ratelimit.Senders(svc, alg))
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDecisionQueueIsBounded: past MaxQueued waiting decisions, a decision
// fails at once as unavailable.
func TestDecisionQueueIsBounded(t *testing.T) {
	c := newGatedClient(t)
	svc := mustNew(t, c, heldConfig(func(c *ratelimit.Config) { c.MaxQueued = 2 }, failClosed()))
	first := holdFirstCall(t, svc, c, "p")
	a := decideAsync(t.Context(), svc, ratelimit.Request{Policy: "p", Key: "a"})
	b := decideAsync(t.Context(), svc, ratelimit.Request{Policy: "p", Key: "b"})
	waitQueued(t, svc, ratelimit.FixedWindow, 2)
	if _, err := svc.Check(t.Context(), ratelimit.Request{Policy: "p", Key: "c"}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("third queued decision: %v, want ErrUnavailable at once", err)
	}
	c.release()
	for _, ch := range []<-chan asyncDecision{first, a, b} {
		if r := receive(t, ch); r.err != nil || !r.d.Allowed {
			t.Errorf("decision within the bound: %+v, %v; want allowed", r.d, r.err)
		}
	}
}

// TestConcurrentDecisionsCountExactly: many concurrent requests on a few
// keys, batched or each in a call of its own, allow exactly each key's share
// of the limit, and every answer is its own key's: key i costs i+1, so each
// allowed decision leaves a remaining that only its key can (run it with
// -race).
//
// Only decisions Redis made are counted here: the policy fails closed, so a
// decision Redis did not make in time is an error, not a degraded allowed
// answer (a fail-open policy's, uncounted, whose remaining is the limit less
// the cost: on a loaded machine such answers once passed for admissions).
// The decision, operation and connection-pool timeouts are a minute, so that
// a busy machine does not turn decisions into failures: unbatched, 320 calls
// wait their turn for the pool's connections and the store runs one script
// at a time.
func TestConcurrentDecisionsCountExactly(t *testing.T) {
	for _, batch := range []int{0, 1} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			p := fixed("p", 60, time.Minute)
			p.Fail = ratelimit.FailClosed
			cfg := rlConfig(0, p)
			cfg.RateLimit.Batch = batch
			cfg.RateLimit.Timeout = time.Minute
			cfg.OpTimeout = time.Minute
			m := miniredis.RunT(t)
			rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true,
				ReadTimeout: time.Minute, WriteTimeout: time.Minute, PoolTimeout: time.Minute})
			t.Cleanup(func() { _ = rdb.Close() })
			svc := mustNew(t, rdb, cfg)
			const keys, perKey = 4, 80
			var mu sync.Mutex
			remaining := make([][]int64, keys)
			var wg sync.WaitGroup
			for i := range keys * perKey {
				wg.Go(func() {
					k := i % keys
					req := ratelimit.Request{Policy: "p", Key: fmt.Sprintf("k%d", k), Cost: int64(k + 1)}
					d, err := svc.Check(t.Context(), req)
					if err != nil || d.Degraded {
						t.Errorf("decision for %s: %+v, %v; want one Redis made", req.Key, d, err)
						return
					}
					if d.Allowed {
						mu.Lock()
						remaining[k] = append(remaining[k], d.Remaining)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			for k := range keys {
				storetest.WantCountdown(t, fmt.Sprintf("k%d", k), remaining[k], 60, int64(k+1))
			}
		})
	}
}
