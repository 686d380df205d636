package locks

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// On Redis Cluster the keep-alive registry is split by hash slot (see
// shards.go), and a directory says when each shard is next due, so each
// renewer visits only the due shards, and the instances share them: a
// renewer claims due slots (keepalive_claim.lua), renews the due entries of
// each claimed shard as on a single node (keepalive_due, the primitives'
// batch scripts), and settles the slots with their shards' next due times
// (keepalive_settle.lua). A keep-alive grant, and a renewal that sets a new
// TTL, mark their slot in the directory (keepalive_mark.lua), coalesced
// per slot, and the grant or renewal is returned once its mark is in the
// directory. Every half minute, and after a
// directory call failed (the directory's node may have failed over and lost
// recent writes), the renewer reconciles: it lists the shards on every
// primary and adds those the directory lacks, due at once. It does so on a
// goroutine of its own, so a primary that does not answer the listing holds
// up no renewal.
//
// The directory lives on one primary, and the renewal of the others' leases
// must not depend on it: while a claim fails (the directory's node is down
// or failing over), the renewer visits, without claims, every shard it
// knows of (renewWithoutDirectory): those the last listings found on each
// primary that answered, and those it renewed itself. Each visit renews
// only what is due, atomically, so instances doing so at once renew no
// lease twice for one due time; the directory is used again as soon as a
// claim succeeds, and a reconciliation adds back what it lost.

// Directory tuning.
const (
	// reconcileEvery is how often a renewer lists the shards on every
	// primary to find those the directory lost.
	reconcileEvery = 30 * time.Second
	// claimSlots is the most slots one claim takes, per RenewParallel.
	claimSlots = 32
	// visitRounds bounds the look-renew rounds of one shard visit; a shard
	// still busy after them is settled as due at once.
	visitRounds = 4
)

// shardDir is a service's state of the shard directory: its keys, the
// marks not yet sent, and the renewer's last view of the shards' sizes.
type shardDir struct {
	due, gens string

	mu       sync.Mutex
	pending  map[int]int64   // slot -> least ms from now until due, not yet sent
	sent     []chan struct{} // closed once the pending marks are in the directory
	flushing bool            // a goroutine is sending pending marks
	closed   bool            // the service is closed: marks are dropped

	// known are the slots whose shards the reconciliations' listings found
	// (on the primaries that answered), for renewWithoutDirectory; a slot
	// leaves once a visit finds its shard empty.
	knownMu sync.Mutex
	known   map[int]bool

	// The renewer's own (one goroutine).
	tracked       map[int]int64 // slot -> entries, as last seen
	lastReconcile time.Time
	// reconcile says a call failed since the last reconciliation began
	// (set by the renewer and by a failed reconciliation); reconciling
	// that one runs, on a goroutine of its own (reconciled ends it).
	reconcile   atomic.Bool
	reconciling atomic.Bool
	reconciled  sync.WaitGroup
}

func newShardDir(prefix string) *shardDir {
	due, gens := dirKeys(prefix)
	d := &shardDir{due: due, gens: gens, pending: map[int]int64{}, tracked: map[int]int64{}, known: map[int]bool{}}
	d.reconcile.Store(true)
	return d
}

// add merges marks into the pending ones (keeping each slot's soonest),
// with the channels to close once they are sent (those of a failed round),
// and calls start when no flush is running. It returns a channel closed
// once the pending marks are in the directory, nil when the service is
// closed (the marks are dropped, and sent closed).
func (d *shardDir) add(marks map[int]int64, sent []chan struct{}, start func()) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		for _, c := range sent {
			close(c)
		}
		return nil
	}
	for slot, in := range marks {
		if cur, ok := d.pending[slot]; !ok || in < cur {
			d.pending[slot] = in
		}
	}
	d.sent = append(d.sent, sent...)
	if len(d.sent) == 0 {
		d.sent = append(d.sent, make(chan struct{}))
	}
	if !d.flushing && len(d.pending) > 0 {
		d.flushing = true
		start()
	}
	return d.sent[len(d.sent)-1]
}

// take hands over the pending marks and the channels to close once they
// are sent, or ends the flush when there are none or the service is closed.
func (d *shardDir) take() (map[int]int64, []chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pending) == 0 || d.closed {
		d.flushing = false
		return nil, nil
	}
	marks, sent := d.pending, d.sent
	d.pending, d.sent = map[int]int64{}, nil
	return marks, sent
}

// close drops the marks not sent yet and every later one: a closed service
// sends none (their leases are found by the next reconciliation). Grants
// waiting for them go on.
func (d *shardDir) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	clear(d.pending)
	for _, c := range d.sent {
		close(c)
	}
	d.sent = nil
}

// flushMarks sends the pending marks until none is left, each round one
// script call with every slot marked meanwhile, and tells the grants
// waiting for them. A failed round is counted (reason "store") and its
// marks are sent again after Config.RenewPoll.
func (s *Service) flushMarks() {
	for {
		marks, sent := s.dir.take()
		if marks == nil {
			return
		}
		args := make([]any, 1, 1+2*len(marks))
		args[0] = "lt"
		for slot, in := range marks {
			args = append(args, slot, in)
		}
		if _, err := s.st.Run(context.Background(), keepaliveMarkScript, []string{s.dir.due, s.dir.gens}, args...); err != nil {
			s.ka.failures.WithLabelValues("store").Inc()
			s.dir.add(marks, sent, func() {}) // this goroutine is still the flush
			time.Sleep(s.cfg.RenewPoll)
			continue
		}
		for _, c := range sent {
			close(c)
		}
	}
}

// claimed is what keepalive_claim reports.
type claimed struct {
	nowMS, nextDueMS int64
	slots            []int
	gens             []string
}

// claimShards runs keepalive_claim for up to limit due slots, claimed for
// claimTime.
func (s *Service) claimShards(ctx context.Context, limit int) (claimed, error) {
	claim := s.claimTime().Milliseconds()
	res, err := s.st.Run(ctx, keepaliveClaimScript, []string{s.dir.due, s.dir.gens}, limit, claim)
	if err != nil {
		return claimed{}, err
	}
	arr, ok := res.([]any)
	if !ok || len(arr) < 2 || len(arr)%2 != 0 {
		return claimed{}, fmt.Errorf("keepalive_claim: unexpected reply %T %v", res, res)
	}
	head, err := store.Int64s("keepalive_claim", arr[:2], 2)
	if err != nil {
		return claimed{}, err
	}
	c := claimed{nowMS: head[0], nextDueMS: head[1]}
	for i := 2; i+1 < len(arr); i += 2 {
		slot, ok1 := arr[i].(int64)
		gen, ok2 := arr[i+1].(string)
		if !ok1 || !ok2 || slot < 0 || slot >= store.ClusterSlots {
			return claimed{}, fmt.Errorf("keepalive_claim: reply[%d] is %T %v, %T %v", i, arr[i], arr[i], arr[i+1], arr[i+1])
		}
		c.slots, c.gens = append(c.slots, int(slot)), append(c.gens, gen)
	}
	return c, nil
}

// claimTime is how long a claimed slot is left to its renewer: a quarter
// of Config.MinKeepaliveTTL (at least a millisecond). When the renewer
// stops before it settles the slot (its instance is killed), another takes
// the slot over once the claim runs out, so the claim must end well within
// what a lease of the shortest TTL has left once due: 2/3 of the TTL, less
// a poll until it is claimed and one until another renewer looks again.
// A quarter leaves it 2/3 - 1/4 of the TTL, above two polls whenever the
// TTL is at least 5 polls (10 by default). A renewer slower than its claim
// is harmless: another may visit the shard too, and each entry is renewed
// once for one due time.
func (s *Service) claimTime() time.Duration {
	return max(s.cfg.MinKeepaliveTTL/4, time.Millisecond)
}

// renewShards renews the due entries of the due shards until none is due,
// claiming up to claimSlots × RenewParallel slots at a time and visiting
// them together (visitShards). It returns how long to sleep before looking
// again.
func (s *Service) renewShards(ctx context.Context) time.Duration {
	d := s.dir
	if (d.reconcile.Load() || time.Since(d.lastReconcile) >= reconcileEvery) && d.reconciling.CompareAndSwap(false, true) {
		// On a goroutine of its own: a primary that does not answer must
		// not hold up the renewals of the others.
		d.reconcile.Store(false)
		d.lastReconcile = time.Now()
		d.reconciled.Go(func() {
			defer d.reconciling.Store(false)
			if err := s.reconcileShards(ctx); err != nil {
				s.storeFailed(ctx)
				d.reconcile.Store(true)
			}
		})
	}
	limit := claimSlots * s.cfg.RenewParallel
	for ctx.Err() == nil {
		c, err := s.claimShards(ctx, limit)
		if err != nil {
			d.reconcile.Store(true)
			s.storeFailed(ctx)
			s.renewWithoutDirectory(ctx)
			return s.retryAfterFailure(ctx)
		}
		next := s.visitShards(ctx, c.slots)
		args := make([]any, 0, 3*len(c.slots))
		for i, slot := range c.slots {
			if next[i] != visitFailed {
				args = append(args, slot, c.gens[i], next[i])
			}
		}
		if len(args) > 0 {
			if _, err := s.st.Run(ctx, keepaliveSettleScript, []string{d.due, d.gens}, args...); err != nil {
				// The slots stay claimed and are visited again once the
				// claim runs out.
				d.reconcile.Store(true)
				s.storeFailed(ctx)
			}
		}
		if len(c.slots) < limit {
			wait := s.cfg.RenewPoll
			if c.nextDueMS > 0 {
				wait = min(wait, time.Duration(c.nextDueMS-c.nowMS)*time.Millisecond)
			}
			return max(wait, time.Millisecond)
		}
	}
	return 0
}

// renewWithoutDirectory visits, without claiming them, every shard the
// renewer knows of while the directory cannot be reached: those the
// reconciliations found, those it visited itself, and those of marks not
// yet sent. The leases of the primaries that answer are renewed as they
// fall due; a slot whose shard is found empty is forgotten.
func (s *Service) renewWithoutDirectory(ctx context.Context) {
	d := s.dir
	d.knownMu.Lock()
	all := maps.Clone(d.known)
	d.knownMu.Unlock()
	for slot := range d.tracked {
		all[slot] = true
	}
	d.mu.Lock()
	for slot := range d.pending {
		all[slot] = true
	}
	d.mu.Unlock()
	if len(all) == 0 || ctx.Err() != nil {
		return
	}
	slots := slices.Sorted(maps.Keys(all))
	next := s.visitShards(ctx, slots)
	d.knownMu.Lock()
	defer d.knownMu.Unlock()
	for i, slot := range slots {
		if next[i] == -1 {
			delete(d.known, slot)
		}
	}
}

// visitFailed is a visit's outcome when a call failed: the slot is left
// claimed.
const visitFailed = -2

// visitShards visits the shards of slots and returns each one's next due
// time (ms; -1 when empty, visitFailed when a call failed). A client that
// pipelines visits them in pipelined rounds (visitPipelined), any other one
// shard at a time, up to Config.RenewParallel at once (visitEach). Once a
// call on a primary failed, the other shards of that primary are not
// visited further this round (visitFailed: they stay claimed and are
// visited again when the claim runs out). A client that pipelines visits
// each primary's shards on a goroutine of its own (visitEachPrimary), so a
// primary that does not answer does not hold up the renewals of the others
// in the round, only the round's end, by one Redis timeout.
func (s *Service) visitShards(ctx context.Context, slots []int) []int64 {
	next := make([]int64, len(slots))
	sizes := make([]int64, len(slots))
	addrs := make([]string, len(slots)) // each slot's primary, "" when unknown
	if r, ok := s.st.Client().(clusterRouter); ok {
		for i, slot := range slots {
			if c, err := r.MasterForKey(ctx, s.shards[slot]); err == nil {
				addrs[i] = c.Options().Addr
			}
		}
	}
	var down sync.Map // primary's address -> a call there failed
	if s.st.CanPipeline() {
		s.visitEachPrimary(ctx, slots, addrs, next, sizes, &down)
	} else {
		all := make([]int, len(slots))
		for i := range all {
			all[i] = i
		}
		s.visitEach(ctx, all, slots, addrs, next, sizes, &down, visitRounds)
	}
	for i, slot := range slots {
		switch next[i] {
		case -1:
			delete(s.dir.tracked, slot)
		case visitFailed:
			// Its primary may be failing over: the directory's may too.
			s.dir.reconcile.Store(true)
		default:
			s.dir.tracked[slot] = sizes[i]
		}
	}
	return next
}

// visitEachPrimary visits the shards of slots with visitPipelined, each
// primary's (by addrs, "" for the slots of no known primary) on a goroutine
// of its own, and sets next and sizes: a primary that does not answer holds
// up the round's end by one Redis timeout, but not the renewals of the
// other primaries' shards in it, which are sent (and settled by their
// replies) without waiting for its due lists.
func (s *Service) visitEachPrimary(ctx context.Context, slots []int, addrs []string, next, sizes []int64, down *sync.Map) {
	byPrimary := map[string][]int{}
	for i, addr := range addrs {
		byPrimary[addr] = append(byPrimary[addr], i)
	}
	if len(byPrimary) == 1 {
		s.visitPipelined(ctx, slots, addrs, next, sizes, down)
		return
	}
	var wg sync.WaitGroup
	for addr, which := range byPrimary {
		wg.Go(func() {
			sub, subAddrs := make([]int, len(which)), make([]string, len(which))
			subNext, subSizes := make([]int64, len(which)), make([]int64, len(which))
			for j, i := range which {
				sub[j], subAddrs[j] = slots[i], addr
			}
			s.visitPipelined(ctx, sub, subAddrs, subNext, subSizes, down)
			for j, i := range which {
				next[i], sizes[i] = subNext[j], subSizes[j]
			}
		})
	}
	wg.Wait()
}

// visitEach visits the shards of slots[i] for each i of which, up to
// Config.RenewParallel at once, each for up to rounds look-renew rounds
// (visitShard), and sets next[i] and sizes[i]. A shard whose primary
// (addrs[i]) is in down is not visited (visitFailed); a visit that fails
// puts its primary there.
func (s *Service) visitEach(ctx context.Context, which, slots []int, addrs []string, next, sizes []int64, down *sync.Map, rounds int) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(s.cfg.RenewParallel, len(which)) {
		wg.Go(func() {
			for i := range work {
				addr := addrs[i]
				if _, failed := down.Load(addr); failed && addr != "" {
					next[i] = visitFailed
					continue
				}
				if next[i], sizes[i] = s.visitShard(ctx, slots[i], rounds); next[i] == visitFailed {
					down.Store(addr, true)
				}
			}
		})
	}
	for _, i := range which {
		work <- i
	}
	close(work)
	wg.Wait()
}

// visitPipelined visits the shards of slots with a few pipelined round
// trips per primary instead of two calls per shard, so that many shards of
// a few due entries each (leases spread over the slots) cost little more
// than one shard of as many: one pipeline of every shard's keepalive_due,
// then pipelines of every renewal batch (s.batches of all shards, each
// pipeline up to RenewBatch × RenewParallel entries). It sets next[i] and
// sizes[i] as visitShard does. A shard whose due list came back full is
// dense: it is visited further by visitEach, so a dense shard takes as many
// rounds as before.
//
// Both scripts are safe to send again (RunPipelined asks for that: a
// pipeline whose connection broke may have run, and its shards are visited
// again): keepalive_due only reads (and drops malformed entries), and a
// batch script renews an entry only while it is still due for the time it
// was listed at, atomically, so a batch sent again skips what it renewed.
//
// Each primary's calls are a pipeline of their own, so a primary that
// failed holds up the others' renewals by one Redis timeout at most. A call
// that fails (a timeout, a lost connection, a redirect) makes its shard
// visitFailed and puts its primary (addrs[i]) in down: none of that
// primary's batches not yet sent is sent, and its shards not renewed are
// visitFailed too.
func (s *Service) visitPipelined(ctx context.Context, slots []int, addrs []string, next, sizes []int64, down *sync.Map) {
	full := s.cfg.RenewBatch * s.cfg.RenewParallel
	isDown := func(i int) bool {
		_, failed := down.Load(addrs[i])
		return failed && addrs[i] != ""
	}
	fail := func(i int) {
		s.storeFailed(ctx)
		next[i] = visitFailed
		down.Store(addrs[i], true)
	}
	calls := make([]store.Call, len(slots))
	dueArgs := keepaliveDueArgs(full)
	for i, slot := range slots {
		calls[i] = store.Call{Script: keepaliveDueScript, Keys: []string{s.shards[slot]}, Args: dueArgs}
	}
	res, errs := s.st.RunPipelined(ctx, calls)
	dues := make([]dueSet, len(slots))
	for i := range slots {
		if errs[i] == nil {
			dues[i], errs[i] = parseDue(res[i])
		}
		if errs[i] != nil {
			fail(i)
		}
	}

	// The renewal batches of every shard with due entries, each with the
	// index of its shard.
	var batches []batch
	var owner []int
	for i, slot := range slots {
		d := dues[i]
		switch {
		case next[i] == visitFailed:
		case isDown(i):
			next[i] = visitFailed
		case d.tracked == 0:
			next[i] = -1
		case len(d.members) == 0:
			next[i], sizes[i] = d.nextDueMS, d.tracked
		default:
			next[i], sizes[i] = -1, d.tracked // the earliest its batches see
			for _, b := range s.batches(s.shards[slot], d.members) {
				batches, owner = append(batches, b), append(owner, i)
			}
		}
	}
	var sent []int // the batches of one pipeline
	for first := 0; first < len(batches); {
		calls, sent = calls[:0], sent[:0]
		for n := 0; first < len(batches) && (len(sent) == 0 || n+len(batches[first].members) <= full); first++ {
			b, i := batches[first], owner[first]
			if next[i] == visitFailed || isDown(i) {
				next[i] = visitFailed
				continue
			}
			calls = append(calls, store.Call{Script: b.script, Keys: b.keys, Args: renewBatchArgs(s.cfg, b.members)})
			sent = append(sent, first)
			n += len(b.members)
		}
		res, errs := s.st.RunPipelined(ctx, calls)
		for j, bi := range sent {
			i := owner[bi]
			s.ka.batches.Inc()
			var n int64
			err := errs[j]
			if err == nil {
				n, err = s.recordBatch(batches[bi], res[j])
			}
			switch {
			case err != nil:
				fail(i)
			case next[i] != visitFailed && n >= 0 && (next[i] < 0 || n < next[i]):
				next[i] = n
			}
		}
	}

	var dense []int
	for i := range slots {
		if next[i] != visitFailed && len(dues[i].members) >= full {
			dense = append(dense, i)
		}
	}
	if len(dense) > 0 {
		s.visitEach(ctx, dense, slots, addrs, next, sizes, down, visitRounds-1)
	}
}

// visitShard renews the due entries of the registry shard of slot, as the
// single-node renewer does with the one registry, in up to rounds
// look-renew rounds, and returns when the shard is next due (-1 when it is
// empty, 0 when still busy after the rounds, visitFailed when a call
// failed: counted, reason "store") and its size, as last seen. A shard
// with due entries takes two calls a round (keepalive_due, then the
// batches, whose replies say when it is next due), one without takes one.
func (s *Service) visitShard(ctx context.Context, slot, rounds int) (next, size int64) {
	reg := s.shards[slot]
	full := s.cfg.RenewBatch * s.cfg.RenewParallel
	for range rounds {
		d, err := s.dueLeases(ctx, reg, full)
		if err != nil {
			s.storeFailed(ctx)
			return visitFailed, 0
		}
		switch {
		case d.tracked == 0:
			return -1, 0
		case len(d.members) == 0:
			return d.nextDueMS, d.tracked
		}
		next, err := s.renewBatches(ctx, reg, d.members)
		if err != nil {
			return visitFailed, 0
		}
		if len(d.members) < full {
			// Every due entry was in the batches: their reply says when
			// the shard is next due.
			return next, d.tracked
		}
		size = d.tracked
	}
	return 0, size // still busy: due at once
}

// masterLister is the part of a cluster client that lists its primaries.
type masterLister interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error
}

// reconcileShards lists the registry shards on every primary (SCAN) and
// adds those the directory lacks, due at once; the shards found on each
// primary that answers are remembered for renewWithoutDirectory, even when
// another primary, or the directory, does not answer. A client that cannot list
// its primaries (not a cluster client) has nothing to reconcile. Returns
// the first error of a SCAN or of the mark script.
func (s *Service) reconcileShards(ctx context.Context) error {
	ml, ok := s.st.Client().(masterLister)
	if !ok {
		return nil
	}
	var mu sync.Mutex
	found := map[int]bool{}
	pattern := shardPattern(s.prefix)
	err := ml.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		var cursor uint64
		for {
			sctx, cancel := context.WithTimeout(ctx, s.opTimeout)
			keys, next, err := c.Scan(sctx, cursor, pattern, 1000).Result()
			cancel()
			if err != nil {
				return err
			}
			mu.Lock()
			s.dir.knownMu.Lock()
			for _, k := range keys {
				if slot, ok := shardSlot(s.prefix, k); ok {
					found[slot] = true
					s.dir.known[slot] = true
				}
			}
			s.dir.knownMu.Unlock()
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	})
	if err != nil {
		return s.st.Err(ctx, "keepalive_reconcile", err)
	}
	args := []any{"nx"}
	for slot := range found {
		args = append(args, strconv.Itoa(slot), 0)
		if len(args) > 2000 {
			if _, err := s.st.Run(ctx, keepaliveMarkScript, []string{s.dir.due, s.dir.gens}, args...); err != nil {
				return err
			}
			args = args[:1]
		}
	}
	if len(args) > 1 {
		_, err = s.st.Run(ctx, keepaliveMarkScript, []string{s.dir.due, s.dir.gens}, args...)
	}
	return err
}
