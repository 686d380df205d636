package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// decisionBatcher sends the rate-limit decisions of concurrent requests to
// Redis together, as one call of their script: their algorithm's for
// single-limit decisions (one key each), ratelimit_multi_batch.lua for
// multi-limit ones (a key per limit, all in one slot: see multiKey). The
// decisions that arrive while a call is out wait, and go in the next call
// together. Redis then sets a script up once per batch instead of once per
// decision, and each side reads and writes once per batch. A decision that
// finds no call out is sent at once, so a quiet server adds no delay.
//
// Normally one call per batcher (per algorithm, and one for multi-limit
// decisions) is out at a time, with at most max decisions. A call still
// out after a stall (the decision timeout divided by stallDivisor: Redis
// is slow) no longer holds the queue up: another call takes it, up to
// maxSenders calls at once, so a decision waits for its own call and not
// for the slow ones before it. On a Redis Cluster a batch is one call per
// hash slot among its keys (per bucket, see ClusterBuckets; a multi-limit
// decision's slot is its keys' one), and the sender goes on to the next
// batch once the stall time has passed even while some of those calls are
// out: a primary that does not answer holds up only the decisions of its
// own slots, each call ending at its deadline.
//
// Each decision is bounded by the decision timeout from the moment it is
// queued: its caller stops waiting at its deadline whatever the call it rides
// in does, a decision whose deadline passed while it was queued is not sent,
// and a call ends at its newest decision's deadline. A caller whose context
// ends stops waiting at once; its decision is left out of a call not yet
// sent. Each failed decision counts once in latchkey_redis_errors_total.
type decisionBatcher struct {
	s         *Service
	rdb       redis.Scripter // the unpipelined client when there is one
	sc        *store.Script
	max       int  // decisions per call
	cluster   bool // group each call's decisions by hash slot
	maxQueued int
	timeout   time.Duration

	mu      sync.Mutex
	queue   []*decisionCall
	senders int // goroutines sending calls; each takes from the queue
}

// maxSenders bounds the calls of one algorithm out at once, and a call out
// for the decision timeout divided by stallDivisor counts as stalled.
const maxSenders, stallDivisor = 8, 8

// decisionCall is one decision waiting for its batch.
type decisionCall struct {
	key      string   // its key: the first of keys for a multi-limit decision
	keys     []string // a multi-limit decision's keys, one per limit; nil for one key
	args     [4]any   // its script's ARGV entries: the first nargs are used
	nargs    int      // (a multi-limit decision's: its cost)
	more     []any    // a multi-limit decision's limits, its policy's: shared, sent once a call
	deadline time.Time
	gone     atomic.Bool // the caller stopped waiting
	done     chan decisionResult
	// timer ends the caller's wait at the deadline even when the script
	// call it rides in outlasts its own (a client that puts no deadline on
	// the socket); kept with the call, so it is made once.
	timer *time.Timer
}

type decisionResult struct {
	v     [4]int64 // a single-limit decision's reply
	multi []any    // a multi-limit decision's reply entries
	err   error
	kind  string // of err, see translateErr
}

var decisionCalls = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &decisionCall{done: make(chan decisionResult, 1), timer: t}
}}

// unpipeliner is a client that batches calls of its own (PipelinedClient);
// the batcher, which batches already, calls the plain client beneath it.
type unpipeliner interface {
	Unpipelined() redis.Scripter
}

func newDecisionBatcher(s *Service, sc *store.Script, cfg Config) *decisionBatcher {
	var rdb redis.Scripter = s.st.Client()
	if u, ok := s.st.Client().(unpipeliner); ok {
		rdb = u.Unpipelined()
	}
	return &decisionBatcher{s: s, rdb: rdb, sc: sc, max: cfg.Batch, maxQueued: cfg.MaxQueued, timeout: cfg.Timeout,
		cluster: s.st.Config().Cluster}
}

// decide queues one decision and waits for its reply {allowed, remaining,
// reset_ms, retry_after_ms}. Returns an error wrapping ErrUnavailable when
// Redis cannot answer within the decision timeout or the queue is full, the
// script's error for a key it cannot use, or context.Canceled when the
// caller went away.
func (b *decisionBatcher) decide(ctx context.Context, key string, args ...any) ([4]int64, error) {
	c := decisionCalls.Get().(*decisionCall)
	c.key, c.keys, c.more = key, nil, nil
	c.nargs = copy(c.args[:], args)
	r := b.wait(ctx, c)
	b.s.st.CountErr(b.sc.Name(), r.kind)
	return r.v, r.err
}

// decideMulti queues one multi-limit decision of cost on keys, one per
// limit, under limits, five ARGV entries per limit (limitArgs; its
// policy's: shared, never modified, and sent once per call for all the
// call's decisions that share them), and waits for its reply entries,
// multiReplyPer per limit, not yet read. Returns the errors decide returns.
func (b *decisionBatcher) decideMulti(ctx context.Context, keys []string, cost int64, limits []any) ([]any, error) {
	c := decisionCalls.Get().(*decisionCall)
	c.key, c.keys, c.more = keys[0], keys, limits
	c.args[0], c.nargs = cost, 1
	r := b.wait(ctx, c)
	b.s.st.CountErr(b.sc.Name(), r.kind)
	return r.multi, r.err
}

// replyLen is the entries of c's reply: four for a single-limit decision,
// multiReplyPer per limit for a multi-limit one.
func (c *decisionCall) replyLen() int {
	if c.keys == nil {
		return 4
	}
	return multiReplyPer * len(c.keys)
}

// wait queues c, filled in but for its deadline, and waits for its result;
// the result's error is not counted yet. c goes back to decisionCalls
// unless a sender may still answer it.
func (b *decisionBatcher) wait(ctx context.Context, c *decisionCall) decisionResult {
	c.deadline = time.Now().Add(b.timeout)
	c.gone.Store(false)

	b.mu.Lock()
	if len(b.queue) >= b.maxQueued {
		b.mu.Unlock()
		c.keys, c.more = nil, nil
		decisionCalls.Put(c)
		return decisionResult{err: fmt.Errorf("%s: %w: %d decisions already queued", b.sc.Name(), store.ErrUnavailable, b.maxQueued), kind: "unavailable"}
	}
	b.queue = append(b.queue, c)
	start := b.senders == 0
	if start {
		b.senders++
	}
	b.mu.Unlock()
	if start {
		go b.send()
	}

	c.timer.Reset(b.timeout)
	select {
	case r := <-c.done:
		c.timer.Stop()
		c.keys, c.more = nil, nil
		decisionCalls.Put(c)
		if ctx.Err() != nil {
			// The caller went away while its call ran: it is told so, as
			// when it leaves before.
			err, kind := store.TranslateErr(ctx, b.sc.Name(), ctx.Err())
			return decisionResult{err: err, kind: kind}
		}
		return r
	case <-ctx.Done():
		// The sender may still answer into c.done: c is not reused.
		c.gone.Store(true)
		c.timer.Stop()
		err, kind := store.TranslateErr(ctx, b.sc.Name(), ctx.Err())
		return decisionResult{err: err, kind: kind}
	case <-c.timer.C:
		c.gone.Store(true)
		err, kind := store.TranslateErr(ctx, b.sc.Name(), context.DeadlineExceeded)
		return decisionResult{err: err, kind: kind}
	}
}

// send sends calls until the queue is empty.
func (b *decisionBatcher) send() {
	batch := make([]*decisionCall, 0, b.max)
	stalled := time.AfterFunc(time.Hour, b.unstall)
	stalled.Stop()
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.max)
		if n == 0 {
			b.senders--
			b.mu.Unlock()
			return
		}
		batch = append(batch[:0], b.queue[:n]...)
		clear(b.queue[:n])
		b.queue = b.queue[n:]
		if len(b.queue) == 0 {
			b.queue = b.queue[:0:0] // let the old array go, or it only grows
		}
		b.mu.Unlock()
		stalled.Reset(b.timeout / stallDivisor)
		b.call(batch)
		stalled.Stop()
	}
}

// unstall runs when a call has been out for the stall time: if decisions
// are waiting and fewer than maxSenders calls are out, another sender takes
// them, so they do not wait for the slow call to end.
func (b *decisionBatcher) unstall() {
	b.mu.Lock()
	start := len(b.queue) > 0 && b.senders < maxSenders
	if start {
		b.senders++
	}
	b.mu.Unlock()
	if start {
		go b.send()
	}
}

// call answers each decision of batch: the live ones in one script call,
// or, on a Redis Cluster, one per hash slot among them (one per bucket of
// the batch's keys, see ClusterBuckets), sent concurrently.
func (b *decisionBatcher) call(batch []*decisionCall) {
	now := time.Now()
	live := batch[:0]
	var deadline time.Time
	for _, c := range batch {
		switch {
		case c.gone.Load():
		case !now.Before(c.deadline):
			err, kind := store.TranslateErr(context.Background(), b.sc.Name(), context.DeadlineExceeded)
			c.done <- decisionResult{err: err, kind: kind}
		default:
			if c.deadline.After(deadline) {
				deadline = c.deadline // the newest
			}
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	if !b.cluster {
		b.callGroup(ctx, live) // no group slice: the single-node hot path
		cancel()
		return
	}
	// One call per slot (a bucket of a policy), sent at once. The sender
	// waits for them up to the stall time only: a primary that does not
	// answer (paused, or failing over) keeps its own calls, each until its
	// deadline, while the next batch goes out, so the decisions of the
	// other primaries' buckets are not queued behind it.
	var wg sync.WaitGroup
	for _, g := range slotGroups(live) {
		wg.Go(func() { b.callGroup(ctx, g) })
	}
	all := make(chan struct{})
	go func() {
		wg.Wait()
		cancel()
		close(all)
	}()
	stall := time.NewTimer(b.timeout / stallDivisor)
	defer stall.Stop()
	select {
	case <-all:
	case <-stall.C:
	}
}

// slotGroups splits live decisions into groups whose keys share one Redis
// Cluster hash slot (store.Slot), in the order each slot first appears, so
// each group can be one script call on the slot's primary.
func slotGroups(live []*decisionCall) [][]*decisionCall {
	var groups [][]*decisionCall
	index := make(map[int]int, len(live))
	for _, c := range live {
		slot := store.Slot(c.key)
		i, ok := index[slot]
		if !ok {
			i = len(groups)
			index[slot] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	return groups
}

// callGroup runs one script call for live, decisions whose keys share a
// slot, bounded by ctx, and answers each decision.
func (b *decisionBatcher) callGroup(ctx context.Context, live []*decisionCall) {
	var keys []string
	var args []any
	if live[0].keys == nil {
		keys, args = singleCallArgs(live)
	} else {
		keys, args = multiCallArgs(live)
	}
	nreply := 0
	for _, c := range live {
		nreply += c.replyLen()
	}
	res, err := b.s.st.EvalSha(ctx, b.rdb, b.sc, keys, args...)
	if err != nil && b.cluster && b.s.st.Rerouted(ctx, keys, err) {
		// It could not connect (nothing ran) to a primary the view no
		// longer names: a failover it had not caught up with.
		res, err = b.s.st.EvalSha(ctx, b.rdb, b.sc, keys, args...)
	}
	var kind string
	if err != nil {
		// Before the caller's cancel: a deadline is not a cancellation.
		err, kind = store.TranslateErr(ctx, b.sc.Name(), err)
	}
	arr, ok := res.([]any)
	if err == nil && (!ok || len(arr) != nreply) {
		err, kind = fmt.Errorf("%s: unexpected reply %T of %d decisions", b.sc.Name(), res, len(live)), "script"
	}
	o := 0
	for _, c := range live {
		r := decisionResult{err: err, kind: kind}
		n := c.replyLen()
		if err == nil {
			e := arr[o : o+n : o+n]
			if c.keys == nil {
				r.v, r.err, r.kind = decisionEntries(b.sc, e)
			} else {
				r.multi, r.err, r.kind = multiEntries(b.sc, e)
			}
		}
		o += n
		c.done <- r
	}
}

// singleCallArgs are the KEYS and ARGV of one call of a single-limit
// algorithm's script for live: each decision's key and entries in turn.
func singleCallArgs(live []*decisionCall) ([]string, []any) {
	nargs := 0
	for _, c := range live {
		nargs += c.nargs
	}
	keys := make([]string, 0, len(live))
	args := make([]any, 0, nargs)
	for _, c := range live {
		keys = append(keys, c.key)
		args = append(args, c.args[:c.nargs]...)
	}
	return keys, args
}

// multiCallArgs are the KEYS and ARGV of one call of
// ratelimit_multi_batch.lua for live, multi-limit decisions: every
// decision's keys in turn; in ARGV each set of limits the decisions use
// once (a policy's, told apart by identity), then each decision's set and
// cost.
func multiCallArgs(live []*decisionCall) ([]string, []any) {
	nkeys, nargs := 0, 1+2*len(live)
	sets := make([][]any, 0, 4)
	for _, c := range live {
		nkeys += len(c.keys)
		if setOf(sets, c) == len(sets) {
			sets = append(sets, c.more)
			nargs += 1 + len(c.more)
		}
	}
	keys := make([]string, 0, nkeys)
	args := make([]any, 0, nargs)
	args = append(args, int64(len(sets)))
	for _, s := range sets {
		args = append(args, int64(len(s)/5))
		args = append(args, s...)
	}
	for _, c := range live {
		keys = append(keys, c.keys...)
		args = append(args, int64(setOf(sets, c)+1), c.args[0])
	}
	return keys, args
}

// setOf is the index in sets of c's limits, or len(sets).
func setOf(sets [][]any, c *decisionCall) int {
	j := 0
	for j < len(sets) && &sets[j][0] != &c.more[0] {
		j++
	}
	return j
}
