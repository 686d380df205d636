package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// newOn returns a Service with the default configuration on a store on rdb.
func newOn(t *testing.T, rdb store.Client) *Service {
	t.Helper()
	st, err := store.New(rdb, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(st, Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// keyRecorder records the keys of every script call, from any goroutine.
type keyRecorder struct {
	*redis.Client
	mu    sync.Mutex
	calls [][]string
}

func (r *keyRecorder) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	r.mu.Lock()
	r.calls = append(r.calls, slices.Clone(keys))
	r.mu.Unlock()
	return r.Client.EvalSha(ctx, sha, keys, args...)
}

// A call sends only the decisions still waiting for it: one whose deadline
// passed in the queue is answered unavailable without reaching Redis, and
// one whose caller left is neither sent nor answered.
func TestDecisionCallSendsOnlyLiveDecisions(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	rec := &keyRecorder{Client: rdb}
	s := newOn(t, rec)
	if err := s.st.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := s.batchers[FixedWindow]
	decision := func(key string, deadline time.Time) *decisionCall {
		return &decisionCall{key: key, args: [4]any{int64(10), int64(60000), int64(1)}, nargs: 3, deadline: deadline,
			done: make(chan decisionResult, 1)}
	}
	expired := decision("expired", time.Now().Add(-time.Millisecond))
	gone := decision("gone", time.Now().Add(time.Minute))
	gone.gone.Store(true)
	live := decision("live", time.Now().Add(time.Minute))

	b.call([]*decisionCall{expired, gone, live})

	if r := <-expired.done; !errors.Is(r.err, store.ErrUnavailable) || r.kind != "unavailable" {
		t.Errorf("decision past its deadline: %+v, want ErrUnavailable", r)
	}
	select {
	case r := <-gone.done:
		t.Errorf("decision whose caller left was answered: %+v", r)
	default:
	}
	if r := <-live.done; r.err != nil || r.v != [4]int64{1, 9, 60000, 0} {
		t.Errorf("live decision: %+v, want allowed with 9 remaining", r)
	}
	if !slices.EqualFunc(rec.calls, [][]string{{"live"}}, slices.Equal) {
		t.Errorf("script calls by keys = %v, want one call with the live decision alone", rec.calls)
	}
}

// A Cluster client batches decisions too, split by hash slot (the store
// says it is a cluster); a single-node client's batchers do not split.
func TestDecisionBatchesOnAClusterGroupBySlot(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}})
	t.Cleanup(func() { _ = rdb.Close() })
	s := newOn(t, rdb)
	single := newOn(t, redis.NewClient(&redis.Options{Addr: m.Addr()}))
	for name, svc := range map[string]*Service{"cluster": s, "single": single} {
		if len(svc.batchers) != len(limitScripts) {
			t.Errorf("batchers on a %s client: %d, want one per algorithm", name, len(svc.batchers))
		}
		for alg, b := range svc.batchers {
			if b.cluster != (name == "cluster") {
				t.Errorf("%s batcher on a %s client groups by slot: %v", alg, name, b.cluster)
			}
		}
	}
}

// holdingClient holds its first script call until release is called, lets
// every other call through, and records the keys of every call.
type holdingClient struct {
	*redis.Client
	mu      sync.Mutex
	calls   [][]string
	entered chan struct{} // closed when the first call is held
	gate    chan struct{}
}

func (c *holdingClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c.mu.Lock()
	c.calls = append(c.calls, slices.Clone(keys))
	first := len(c.calls) == 1
	c.mu.Unlock()
	if first {
		close(c.entered)
		<-c.gate
	}
	return c.Client.EvalSha(ctx, sha, keys, args...)
}

// waitFor waits until cond holds, reading b's state under its lock.
func waitFor(t *testing.T, b *decisionBatcher, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		ok := cond()
		b.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// While one call is held (Redis slow for it), the stall path hands the
// decisions queued behind it to another sender, twice, the second time to
// decisions that reuse the pooled calls of the first ones: every decision on
// the shared key is counted once and answered with its own remaining, the
// held one last. The stall is forced by running unstall, as the stall timer
// does, so the decision timeout (a minute) never ends a wait here.
func TestStalledCallAndPooledCallsCountExactly(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := &holdingClient{Client: rdb, entered: make(chan struct{}), gate: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-c.gate:
		default:
			close(c.gate)
		}
	})
	st, err := store.New(c, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(st, Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := s.batchers[FixedWindow]
	type answer struct {
		v   [4]int64
		err error
	}
	decide := func() <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			v, err := b.decide(t.Context(), "k", 60, 60000, 1)
			ch <- answer{v, err}
		}()
		return ch
	}
	receive := func(ch <-chan answer) answer {
		t.Helper()
		select {
		case a := <-ch:
			return a
		case <-time.After(10 * time.Second):
			t.Fatal("no answer within 10s")
			return answer{}
		}
	}
	// remainings receives the answers of chs: each must be allowed.
	remainings := func(chs []<-chan answer) []int64 {
		t.Helper()
		var got []int64
		for _, ch := range chs {
			a := receive(ch)
			if a.err != nil || a.v[0] != 1 {
				t.Errorf("decision: %v, %v; want allowed", a.v, a.err)
			}
			got = append(got, a.v[1])
		}
		slices.Sort(got)
		slices.Reverse(got)
		return got
	}
	// queueThree queues three decisions behind the held call, none sent.
	queueThree := func() []<-chan answer {
		t.Helper()
		waitFor(t, b, "only the held call's sender", func() bool { return b.senders == 1 })
		chs := []<-chan answer{decide(), decide(), decide()}
		waitFor(t, b, "three queued decisions", func() bool { return len(b.queue) == 3 })
		return chs
	}

	held := decide()
	<-c.entered
	first := queueThree()
	b.unstall()
	if got := remainings(first); !slices.Equal(got, []int64{59, 58, 57}) {
		t.Errorf("decisions taken from a stalled call: remaining %v, want 59 58 57", got)
	}
	second := queueThree() // their calls come back from the pool
	b.unstall()
	if got := remainings(second); !slices.Equal(got, []int64{56, 55, 54}) {
		t.Errorf("decisions in reused calls: remaining %v, want 56 55 54", got)
	}
	close(c.gate)
	if a := receive(held); a.err != nil || a.v[0] != 1 || a.v[1] != 53 {
		t.Errorf("the held decision: %v, %v; want allowed, remaining 53", a.v, a.err)
	}
	if v, err := m.Get("k"); err != nil || v != "7" {
		t.Errorf("counter = %q, %v; want 7, each decision counted once", v, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if want := [][]string{{"k"}, {"k", "k", "k"}, {"k", "k", "k"}}; !slices.EqualFunc(c.calls, want, slices.Equal) {
		t.Errorf("script calls by keys = %v, want %v", c.calls, want)
	}
}

// slowCalls holds every script call until the test lets that call go, as a
// slow Redis would, and announces each call it holds on entered.
type slowCalls struct {
	*redis.Client
	entered chan heldCall
}

// heldCall is one script call held by slowCalls: closing proceed lets it
// reach Redis.
type heldCall struct {
	keys    []string
	proceed chan struct{}
}

func (c *slowCalls) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	h := heldCall{keys: slices.Clone(keys), proceed: make(chan struct{})}
	c.entered <- h
	<-h.proceed
	return c.Client.EvalSha(ctx, sha, keys, args...)
}

// TestDecisionsWhileRedisIsSlow: with every call slow, each decision waits
// for its own call and not for the slow calls before it: calls stalled one
// behind the other (the stall forced by running unstall, as the stall timer
// does) are answered in any order, each as soon as its own call ends. At
// most maxSenders calls are out at once; a decision beyond them waits for
// the first sender that is free.
func TestDecisionsWhileRedisIsSlow(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := &slowCalls{Client: rdb, entered: make(chan heldCall, maxSenders+1)}
	st, err := store.New(c, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(st, Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptLoad(t.Context(), lua.Source("ratelimit_fixed_window")).Err(); err != nil {
		t.Fatal(err)
	}
	b := s.batchers[FixedWindow]
	type answer struct {
		v   [4]int64
		err error
	}
	decide := func(key string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			v, err := b.decide(t.Context(), key, 10, 60000, 1)
			ch <- answer{v, err}
		}()
		return ch
	}
	next := func() heldCall {
		t.Helper()
		select {
		case h := <-c.entered:
			return h
		case <-time.After(10 * time.Second):
			t.Fatal("no script call within 10s")
			return heldCall{}
		}
	}
	answered := func(key string, ch <-chan answer) {
		t.Helper()
		select {
		case a := <-ch:
			if a.err != nil || a.v[0] != decisionAllowed {
				t.Errorf("decision %s: %v, %v; want allowed", key, a.v, a.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("decision %s: no answer within 10s of its call's end", key)
		}
	}

	keys := make([]string, maxSenders)
	answers := make([]<-chan answer, maxSenders)
	calls := make([]heldCall, maxSenders)
	for i := range maxSenders {
		keys[i] = fmt.Sprintf("k%d", i)
		answers[i] = decide(keys[i])
		if i > 0 {
			waitFor(t, b, "a decision queued behind the slow calls", func() bool { return len(b.queue) == 1 })
			b.unstall()
		}
		calls[i] = next()
		if !slices.Equal(calls[i].keys, keys[i:i+1]) {
			t.Fatalf("call %d has keys %v, want %v", i, calls[i].keys, keys[i:i+1])
		}
	}
	// maxSenders calls are out: the next decision waits for one of them.
	extra := decide("extra")
	waitFor(t, b, "the extra decision queued", func() bool { return len(b.queue) == 1 })
	b.unstall()
	waitFor(t, b, "no sender past maxSenders", func() bool { return b.senders == maxSenders && len(b.queue) == 1 })

	// The calls end newest first: each answers its own decision while the
	// older ones are still out.
	for i := maxSenders - 1; i >= 0; i-- {
		close(calls[i].proceed)
		answered(keys[i], answers[i])
		for j := range i {
			select {
			case a := <-answers[j]:
				t.Fatalf("decision %s answered (%v, %v) while its call is still out", keys[j], a.v, a.err)
			default:
			}
		}
		if i == maxSenders-1 { // that sender was free first: it takes the extra decision
			h := next()
			if !slices.Equal(h.keys, []string{"extra"}) {
				t.Fatalf("call after the first free sender has keys %v, want [extra]", h.keys)
			}
			close(h.proceed)
			answered("extra", extra)
		}
	}
}

// On a cluster a call's decisions are split by hash slot, in the order
// each slot first appears; keys sharing a hash tag share a group.
func TestSlotGroups(t *testing.T) {
	calls := make([]*decisionCall, 0, 6)
	for _, k := range []string{"a", "{a}:1", "b", "x{a}", "b", "c"} {
		calls = append(calls, &decisionCall{key: k})
	}
	keysOf := func(groups [][]*decisionCall) [][]string {
		var out [][]string
		for _, g := range groups {
			var ks []string
			for _, c := range g {
				ks = append(ks, c.key)
			}
			out = append(out, ks)
		}
		return out
	}
	got := keysOf(slotGroups(calls))
	want := [][]string{{"a", "{a}:1", "x{a}"}, {"b", "b"}, {"c"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("slotGroups = %v, want %v", got, want)
	}
}

// newClusterOn returns a Service on a store in cluster mode on rdb (one
// node that serves every slot: miniredis), its scripts loaded, decisions
// given timeout.
func newClusterOn(t *testing.T, rdb store.Client, timeout time.Duration) *Service {
	t.Helper()
	st, err := store.New(rdb, store.Config{Cluster: true, OpTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(st, Config{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// With the store in cluster mode concurrent decisions on many slots go in
// script calls of one slot each, every decision answered as in one call: no
// script call names keys of two slots, and each key counts every decision.
func TestDecisionsOnAClusterGoInCallsOfOneSlot(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	rec := &keyRecorder{Client: rdb}
	s := newClusterOn(t, rec, time.Minute)
	b := s.batchers[FixedWindow]
	const keys, perKey = 20, 3
	allowed := make([]atomic.Int32, keys)
	var wg sync.WaitGroup
	for i := range keys * perKey {
		wg.Go(func() {
			v, err := b.decide(t.Context(), fmt.Sprintf("k%d", i%keys), 10, 60000, 1)
			if err != nil || v[0] != 1 {
				t.Errorf("decision %d: %v, %v; want allowed", i, v, err)
				return
			}
			allowed[i%keys].Add(1)
		})
	}
	wg.Wait()
	for k := range keys {
		if n := allowed[k].Load(); n != perKey {
			t.Errorf("k%d: %d allowed, want %d", k, n, perKey)
		}
		if got, _ := m.Get(fmt.Sprintf("k%d", k)); got != strconv.Itoa(perKey) {
			t.Errorf("k%d's counter = %q, want %d", k, got, perKey)
		}
	}
	for _, ks := range rec.calls {
		for _, k := range ks {
			if store.Slot(k) != store.Slot(ks[0]) {
				t.Errorf("one script call names keys of two slots: %v", ks)
				break
			}
		}
	}
}

// slotStaller holds every script call that names a key of one slot until
// released, and passes the others on.
type slotStaller struct {
	*redis.Client
	slot    int
	held    chan struct{} // gets a value when a call is held
	release chan struct{}
}

func (r *slotStaller) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if store.Slot(keys[0]) == r.slot {
		r.held <- struct{}{}
		<-r.release
	}
	return r.Client.EvalSha(ctx, sha, keys, args...)
}

// On a cluster a slot whose call does not come back (its primary paused)
// holds up only its own decisions: those of other slots, sent after it,
// are answered while it is held (once its stall time passed, not at its
// deadline), and the held one once its call returns.
func TestAStuckSlotHoldsUpOnlyItsOwnDecisions(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	stall := &slotStaller{Client: rdb, slot: store.Slot("stuck"), held: make(chan struct{}, 1), release: make(chan struct{})}
	// Decisions have 16s: the held call's outlasts the others', sent after
	// its stall time (2s).
	s := newClusterOn(t, stall, 16*time.Second)
	b := s.batchers[FixedWindow]
	stuck := make(chan error, 1)
	go func() {
		_, err := b.decide(t.Context(), "stuck", 10, 60000, 1)
		stuck <- err
	}()
	<-stall.held
	for i := range 50 {
		key := fmt.Sprintf("other-%d", i)
		if store.Slot(key) == stall.slot {
			continue
		}
		if v, err := b.decide(t.Context(), key, 10, 60000, 1); err != nil || v[0] != 1 {
			t.Fatalf("%s while another slot's call is held: %v, %v; want allowed", key, v, err)
		}
	}
	close(stall.release)
	if err := <-stuck; err != nil {
		t.Errorf("the held decision: %v, want answered once its call returned", err)
	}
}
