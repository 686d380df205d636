package ratelimit

import (
	"context"
	"sync"
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
}

// leaseTable holds the pools of the leased limits' keys.
type leaseTable struct {
	mu sync.Mutex
	m  map[string]*leasePool
}

// maxLeasePools is how many pools the table keeps before it drops those
// whose window ended.
const maxLeasePools = 4096

// pool returns the pool of a key, made on first use.
func (t *leaseTable) pool(key string, now time.Time) *leasePool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.m[key]; ok {
		return p
	}
	if t.m == nil {
		t.m = map[string]*leasePool{}
	}
	if len(t.m) >= maxLeasePools {
		for k, p := range t.m {
			if p.idle(now) {
				delete(t.m, k)
			}
		}
	}
	p := &leasePool{}
	t.m[key] = p
	return p
}

// idle reports whether the pool holds nothing worth keeping.
func (p *leasePool) idle(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refill == nil && !now.Before(p.until) && !now.Before(p.dryUntil)
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
