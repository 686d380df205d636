package ratelimit

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// holdUnits makes p hold units until until, as a granted lease does, and
// unpins it.
func holdUnits(t *testing.T, p *leasePool, units int64, until, now time.Time) {
	t.Helper()
	if p == nil {
		t.Fatal("no pool")
	}
	leaseTake{pool: p}.granted(units, 0, 0, until, now)
	p.unpin()
}

// A pool just made is pinned until its decision is done with it: keys
// made after it, twice the table's cap of them, never drop it, though it
// holds nothing yet.
func TestLeaseTableKeepsAPinnedPool(t *testing.T) {
	var tab leaseTable
	now := time.Now()
	first := tab.pool("first", now)
	for i := range 2 * MaxLeasePools {
		p := tab.pool(fmt.Sprint("k", i), now)
		if p == nil {
			t.Fatalf("key %d got no pool, though every other pool holds nothing", i)
		}
		p.unpin()
	}
	if n := tab.len(); n != MaxLeasePools {
		t.Errorf("%d pools, want the cap %d", n, MaxLeasePools)
	}
	if p := tab.find("first"); p != first {
		t.Fatalf("first key's pool %p, want the one it was given (%p)", p, first)
	}
	first.unpin()
	first.unpin()
}

// A full table drops a pool only once it holds nothing: while every pool
// holds units of a live window a new key gets no pool (its decisions are
// then counted without a lease), and each pool whose units are spent, or
// whose window ended, makes room for one, found within one sweep of the
// table by the keys that find it full.
func TestLeaseTableDropsOnlyPoolsThatHoldNothing(t *testing.T) {
	var tab leaseTable
	now := time.Now()
	until := now.Add(time.Minute)
	for i := range MaxLeasePools {
		holdUnits(t, tab.pool(fmt.Sprint("k", i), now), 1, until, now)
	}
	if p := tab.pool("new", now); p != nil {
		t.Fatal("a full table of pools holding units dropped one")
	}
	if n := tab.len(); n != MaxLeasePools {
		t.Errorf("%d pools, want the cap %d", n, MaxLeasePools)
	}

	spent := tab.find("k7")
	if take, ok := spent.tryLocal(1, now); !ok || take.have != 1 {
		t.Fatalf("tryLocal on k7: %+v, %v", take, ok)
	}
	spent.unpin()
	// Each new key looks at evictScan pools; one sweep of the table finds
	// k7.
	got := 0
	for i := range MaxLeasePools/evictScan + 1 {
		if p := tab.pool(fmt.Sprint("new", i), now); p != nil {
			got++
			p.unpin()
		}
	}
	if got != 1 {
		t.Errorf("%d new keys got a pool in one sweep, want 1 (k7's)", got)
	}
	if p := tab.find("k7"); p != nil {
		t.Error("k7 kept, want it dropped for a new key")
	}
	for _, k := range []string{"k0", "k8", fmt.Sprint("k", MaxLeasePools-1)} {
		if p := tab.find(k); p == nil {
			t.Errorf("%s dropped while it held units", k)
		} else {
			p.unpin()
		}
	}

	// The window ended: any pool may go.
	later := until.Add(time.Millisecond)
	for i := range MaxLeasePools {
		p := tab.pool(fmt.Sprint("next", i), later)
		if p == nil {
			t.Fatalf("new key %d got no pool after every window ended", i)
		}
		p.unpin()
	}
	if n := tab.len(); n != MaxLeasePools {
		t.Errorf("%d pools, want the cap %d", n, MaxLeasePools)
	}
}

// Goroutines take, spend and refill the pools of three times as many keys
// as the table holds, each decision as runLimits takes it: the table
// stays within its cap, a pinned pool is the one its key finds, and every
// pool dropped held no units, so none counted in Redis was lost.
func TestLeaseTableUnderConcurrentUse(t *testing.T) {
	var tab leaseTable
	now := time.Now()
	until := now.Add(time.Hour)
	seen := make([][]*leasePool, 8)
	var wg sync.WaitGroup
	for w := range seen {
		wg.Go(func() {
			for i := range 3 * MaxLeasePools {
				key := fmt.Sprint("k", (i*7+w*131)%(3*MaxLeasePools))
				p := tab.pool(key, now)
				if p == nil {
					continue // counted without a lease
				}
				seen[w] = append(seen[w], p)
				if q := tab.find(key); q != p {
					t.Errorf("%s: pinned pool %p, the table has %p", key, p, q)
				} else {
					q.unpin()
				}
				take, err := p.reserve(t.Context(), 1, now)
				if err != nil {
					t.Error(err)
				}
				if take.refill {
					take.granted(2, 1-take.have, 0, until, now) // Redis grants 2 with the unit asked
				}
				p.unpin()
			}
		})
	}
	wg.Wait()
	if n := tab.len(); n > MaxLeasePools {
		t.Errorf("%d pools, above the cap %d", n, MaxLeasePools)
	}
	for _, ps := range seen {
		for _, p := range ps {
			if q := tab.find(p.key); q != nil {
				q.unpin()
				if q == p {
					continue
				}
			}
			p.mu.Lock()
			units := p.units
			p.mu.Unlock()
			if units != 0 {
				t.Errorf("%s: a pool dropped with %d units", p.key, units)
			}
		}
	}
}
