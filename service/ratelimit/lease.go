package ratelimit

import (
	"container/list"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// leasePool is what this instance holds of one leased limit's counter (one
// Redis key): units granted by Redis and not yet spent, usable until the
// window ends. A lease is taken by one script call at a time per key: the
// caller that finds the pool short takes the refill, and the others wait
// for it, so the units held here stay at most the lease. That bounds the
// early denials: a request denied while the window still had room was
// denied for units the other instances held, at most lease each.
type leasePool struct {
	mu    sync.Mutex
	units int64     // granted, not spent
	until time.Time // the units are usable before it (local clock)
	// remaining is Redis's count left in the window after the last grant
	// seen here, for the answer's remaining (units plus it).
	remaining int64
	// avail, before dryUntil, is what Redis had left when it last denied
	// this pool: a request costing more than units + avail is denied
	// without a call, as a window's count only grows.
	avail    int64
	dryUntil time.Time
	refill   chan struct{} // non-nil while a call takes a lease; closed after

	key  string       // the counter's key, the pool's in leaseTable
	refs atomic.Int32 // the decisions that have it pinned
}

// leaseTable holds the pools of the leased limits' keys: at most
// MaxLeasePools, found by key and kept in the order they were last used,
// so that finding a key's pool, and dropping one to make room, costs the
// same at any number of keys.
type leaseTable struct {
	mu  sync.Mutex
	m   map[string]*list.Element // a key's element in lru
	lru list.List                // of *leasePool, the most recently used first
}

// MaxLeasePools is how many keys of leased limits an instance keeps units
// for: about 230 bytes a pool with a 32-byte key, so about 4 MiB, enough
// for a per-client limit over the 10,000 clients a gateway sees. A pool
// is dropped only while it holds nothing (see idle), so no unit Redis
// counted for it is lost. When the table is full and the pools looked at
// all hold units, a new key gets no pool: its decisions are counted in
// Redis without a lease, exact as an unleased limit's, until a pool can be
// dropped (its units spent or its window ended).
const MaxLeasePools = 16384

// evictScan is how many pools, from the least recently used, a new key
// looks at when the table is full; each one that holds units is moved to
// the front, so the next new key looks at others.
const evictScan = 8

// pool returns the pool of a key, made on first use, pinned: it is not
// dropped before the caller calls unpin. Returns nil when the table is
// full and no pool looked at can be dropped at now.
func (t *leaseTable) pool(key string, now time.Time) *leasePool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.findLocked(key); p != nil {
		return p
	}
	if t.m == nil {
		t.m = map[string]*list.Element{}
	}
	if t.lru.Len() < MaxLeasePools {
		p := newLeasePool(key)
		t.m[key] = t.lru.PushFront(p)
		return p
	}
	for range evictScan {
		e := t.lru.Back()
		old := e.Value.(*leasePool)
		t.lru.MoveToFront(e)
		if old.idle(now) {
			delete(t.m, old.key)
			p := newLeasePool(key)
			e.Value = p
			t.m[key] = e
			return p
		}
	}
	return nil
}

// newLeasePool returns an empty pool for key, pinned once.
func newLeasePool(key string) *leasePool {
	p := &leasePool{key: key}
	p.refs.Store(1)
	return p
}

// find returns the pool of a key, pinned as by pool, or nil if it has
// none.
func (t *leaseTable) find(key string) *leasePool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.findLocked(key)
}

// findLocked is find; t.mu is held.
func (t *leaseTable) findLocked(key string) *leasePool {
	e, ok := t.m[key]
	if !ok {
		return nil
	}
	t.lru.MoveToFront(e)
	p := e.Value.(*leasePool)
	p.refs.Add(1)
	return p
}

// len reports how many pools the table holds.
func (t *leaseTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}

// unpin ends a pin taken by leaseTable.pool or find.
func (p *leasePool) unpin() { p.refs.Add(-1) }

// idle reports whether the pool can be dropped at now: no decision has it
// pinned (so none is taking a lease or holds units to give back), and it
// holds no unit of a live window. Called with the table's lock held, which
// every pin takes: a pool found idle stays so until it is dropped.
func (p *leasePool) idle(now time.Time) bool {
	if p.refs.Load() > 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unitsAt(now) == 0
}

// leaseTake is what reserve took for one decision.
type leaseTake struct {
	pool  *leasePool
	have  int64     // units taken from the pool for this decision
	until time.Time // the pool's until when they were taken
	// refill is set when this decision takes a lease: it must call settle.
	refill bool
	// dry is set when the pool knows Redis cannot cover the request before
	// dryUntil: the decision is a denial without a call.
	dry bool
}

// reserve takes the units of a decision costing cost at now: all of them
// from the pool when it holds enough (have = cost), else what it holds,
// and the refill (the caller asks Redis for the rest and a new lease). It
// waits while another decision takes a lease. Returns ctx's error if ctx
// ends first.
func (p *leasePool) reserve(ctx context.Context, cost int64, now time.Time) (leaseTake, error) {
	for {
		p.mu.Lock()
		live := now.Before(p.until)
		switch {
		case live && p.units >= cost:
			p.units -= cost
			t := leaseTake{pool: p, have: cost, until: p.until}
			p.mu.Unlock()
			return t, nil
		case now.Before(p.dryUntil) && p.avail+p.unitsAt(now) < cost:
			p.mu.Unlock()
			return leaseTake{pool: p, dry: true}, nil
		case p.refill == nil:
			t := leaseTake{pool: p, refill: true, until: p.until}
			if live {
				t.have = p.units
			}
			p.units = 0
			p.refill = make(chan struct{})
			p.mu.Unlock()
			return t, nil
		}
		ch := p.refill
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return leaseTake{}, ctx.Err()
		}
		now = time.Now()
	}
}

// tryLocal takes cost units from the pool if it holds them at now, without
// waiting: the decision is then answered without Redis.
func (p *leasePool) tryLocal(cost int64, now time.Time) (leaseTake, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !now.Before(p.until) || p.units < cost {
		return leaseTake{}, false
	}
	p.units -= cost
	return leaseTake{pool: p, have: cost, until: p.until}, true
}

// unitsAt is the pool's usable units at now; p.mu is held.
func (p *leasePool) unitsAt(now time.Time) int64 {
	if now.Before(p.until) {
		return p.units
	}
	return 0
}

// granted settles a refill whose decision Redis counted: granted units
// were counted for it (need of them spent by this decision), usable until
// until; remaining is what Redis has left after them. Units held from a
// window that ended by now are dropped: a pool's until is never after its
// Redis window's end, so a window still live here is the one Redis granted
// in.
func (t leaseTake) granted(granted, need, remaining int64, until, now time.Time) {
	p := t.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if !now.Before(p.until) {
		p.units = 0
	}
	p.until = until
	p.units += granted - need
	p.remaining = remaining
	t.done()
}

// undo gives the units of a decision that was not counted back to the
// pool (if their window is still the pool's); when denied is set, Redis
// had avail left until dryUntil.
func (t leaseTake) undo(denied bool, avail int64, dryUntil time.Time) {
	p := t.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.have > 0 && p.until.Equal(t.until) {
		p.units += t.have
	}
	if denied {
		p.avail, p.dryUntil = avail, dryUntil
	}
	t.done()
}

// done ends the take's refill, if it has one; p.mu is held.
func (t leaseTake) done() {
	if t.refill {
		close(t.pool.refill)
		t.pool.refill = nil
	}
}

// local reports the pool's view of the limit for an answer from it: the
// units left in the window as far as this instance knows, and the time to
// the window's end.
func (p *leasePool) local(now time.Time) (remaining int64, reset time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.remaining + p.unitsAt(now), max(p.until.Sub(now), 0)
}
