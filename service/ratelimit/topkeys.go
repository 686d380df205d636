package ratelimit

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// TopKeysCapacity is how many keys the sketch of one tenant's policy keeps
// per period: its memory is fixed, whatever the number of keys denied.
const TopKeysCapacity = 64

// TopKeysPeriod is how long one period of the sketch lasts. The sketch
// keeps the period under way and the one before, so its keys are those
// denied in the last TopKeysPeriod to 2×TopKeysPeriod (TopKeysWindow).
const TopKeysPeriod = 150 * time.Second

// TopKeysWindow is the longest stretch of time the sketch reflects.
const TopKeysWindow = 2 * TopKeysPeriod

// MaxTopKeys bounds how many keys one answer of TopDenied lists; a request
// that names no number gets DefaultTopKeys.
const (
	MaxTopKeys     = 100
	DefaultTopKeys = 10
)

// topKeys is the most-denied keys of one tenant's policy on this instance:
// two space-saving sketches, one for the period under way and one for the
// period before, rotated as time passes. It is touched on denials only;
// its mutex guards a few dozen comparisons.
type topKeys struct {
	mu    sync.Mutex
	start time.Time // when cur's period began
	cur   spaceSaving
	prev  spaceSaving
}

// add counts a denial of key at now.
func (t *topKeys) add(key string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rotate(now)
	t.cur.add(key)
}

// rotate starts a new period when cur's is over: cur becomes prev, or both
// are emptied when more than a period went by without a denial.
func (t *topKeys) rotate(now time.Time) {
	switch el := now.Sub(t.start); {
	case t.start.IsZero() || el >= 2*TopKeysPeriod:
		t.cur.reset()
		t.prev.reset()
		t.start = now
	case el >= TopKeysPeriod:
		t.prev, t.cur = t.cur, t.prev
		t.cur.reset()
		t.start = t.start.Add(TopKeysPeriod)
	}
}

// KeyCount is a key and how many times it was denied.
type KeyCount struct {
	Key    string
	Denied int64
}

// top returns at most n keys, most denied first, as of now: the two
// periods' guaranteed counts added up (see spaceSaving.guaranteed). A key
// the sketch cannot vouch for a denial of is left out.
func (t *topKeys) top(now time.Time, n int) []KeyCount {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rotate(now)
	sum := make(map[string]int64, len(t.cur.items)+len(t.prev.items))
	for _, s := range []*spaceSaving{&t.prev, &t.cur} {
		for _, it := range s.items {
			if g := it.count - it.err; g > 0 {
				sum[it.key] += g
			}
		}
	}
	out := make([]KeyCount, 0, len(sum))
	for k, c := range sum {
		out = append(out, KeyCount{Key: k, Denied: c})
	}
	slices.SortFunc(out, func(a, b KeyCount) int {
		return cmp.Or(cmp.Compare(b.Denied, a.Denied), cmp.Compare(a.Key, b.Key))
	})
	return out[:min(n, len(out))]
}

// size is how many keys the sketch holds now, over both periods.
func (t *topKeys) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.cur.items) + len(t.prev.items)
}

// spaceSaving is Metwally, Agrawal and El Abbadi's space-saving sketch of
// the most frequent keys in a stream, with TopKeysCapacity counters: a key
// counted is found and counted again, or takes a free counter, or else
// replaces the key with the smallest count, inheriting that count (plus
// one) as its possible overestimate. Every key counted more than
// total/TopKeysCapacity times is in it. With at most TopKeysCapacity keys
// in a period every count is exact.
type spaceSaving struct {
	items []ssItem // at most TopKeysCapacity, allocated on the first key
}

// ssItem is one counter: a key, its count, and by how much the count may
// exceed the key's true count.
type ssItem struct {
	key        string
	count, err int64
}

// add counts one occurrence of key. The linear search over at most
// TopKeysCapacity keys finds both the key and the smallest counter in one
// pass, with no index to keep: a denial is rare next to an allowed request.
func (s *spaceSaving) add(key string) {
	if s.items == nil {
		s.items = make([]ssItem, 0, TopKeysCapacity)
	}
	m := -1
	for i := range s.items {
		if s.items[i].key == key {
			s.items[i].count++
			return
		}
		if m < 0 || s.items[i].count < s.items[m].count {
			m = i
		}
	}
	if len(s.items) < TopKeysCapacity {
		s.items = append(s.items, ssItem{key: key, count: 1})
		return
	}
	low := s.items[m].count
	s.items[m] = ssItem{key: key, count: low + 1, err: low}
}

// reset empties the sketch, keeping its counters' memory; the keys are
// dropped so that their strings can be collected.
func (s *spaceSaving) reset() {
	clear(s.items)
	s.items = s.items[:0]
}
