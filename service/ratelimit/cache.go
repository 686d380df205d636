package ratelimit

import (
	"sync"
	"time"
)

// denyCache remembers keys known to be over their limit until a given time,
// so repeated requests from a client that is already denied are answered
// without a Redis call. It holds at most max entries.
type denyCache struct {
	mu  sync.Mutex
	max int
	m   map[denyKey]denyEntry
}

// denyKey names a cached denial: the Redis key of the decision and the limit
// it was taken under, so a changed limit never reuses an old denial.
type denyKey struct {
	key          string
	limit, burst int64
}

// denyEntry is one cached denial: requests costing at least cost are denied
// until until.
type denyEntry struct {
	until     time.Time
	reset     time.Time
	cost      int64
	remaining int64
}

// newDenyCache returns a cache of at most max entries; 0 disables it.
func newDenyCache(max int) *denyCache {
	if max < 1 {
		return nil
	}
	return &denyCache{max: max, m: make(map[denyKey]denyEntry)}
}

// get returns the cached denial of key for a request of cost, if one holds
// at now. A request cheaper than the cached one may fit and is not answered
// from the cache.
func (c *denyCache) get(key denyKey, cost int64, now time.Time) (denyEntry, bool) {
	if c == nil {
		return denyEntry{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return denyEntry{}, false
	}
	if !now.Before(e.until) {
		delete(c.m, key)
		return denyEntry{}, false
	}
	return e, cost >= e.cost
}

// put caches a denial. When the cache is full it first drops expired
// entries, then, if still full, arbitrary ones, until a sixteenth of the
// cache (at least one entry) is free: one walk of the entries makes room
// for that many denials, so a full cache costs a denial a sixteenth of a
// walk, not a walk of every entry under the lock.
func (c *denyCache) put(key denyKey, e denyEntry, now time.Time) {
	if c == nil || !now.Before(e.until) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[key]; ok && old.cost < e.cost && now.Before(old.until) {
		return // keep the entry that covers more requests
	}
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		for k, v := range c.m {
			if !now.Before(v.until) {
				delete(c.m, k)
			}
		}
		keep := c.max - max(1, c.max/16)
		for k := range c.m {
			if len(c.m) <= keep {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[key] = e
}

// len reports the number of entries, expired ones included.
func (c *denyCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// forget drops the cached denial of key, if any: its counter changed
// (a refund, a reset), so Redis decides the next request.
func (c *denyCache) forget(key denyKey) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}
