package ratelimit

import (
	"strconv"
	"testing"
	"time"
)

// A full cache makes room for a sixteenth of its entries at once: the denial
// that finds it full drops that many (expired ones first), and the next ones
// fit without dropping any until it is full again.
func TestDenyCacheFullFreesASixteenth(t *testing.T) {
	const size = 160
	now := time.Now()
	c := newDenyCache(size)
	live := denyEntry{until: now.Add(time.Minute), cost: 1}
	for i := range size {
		e := live
		if i < 4 {
			e.until = now.Add(time.Millisecond) // expired by the time the cache is full
		}
		c.put(denyKey{key: strconv.Itoa(i)}, e, now)
	}
	later := now.Add(time.Second)
	c.put(denyKey{key: "one more"}, live, later)
	if n, want := c.len(), size-size/16+1; n != want {
		t.Fatalf("%d entries after a denial into a full cache, want %d", n, want)
	}
	for i := range 4 {
		if _, ok := c.m[denyKey{key: strconv.Itoa(i)}]; ok {
			t.Errorf("expired entry %d kept", i)
		}
	}
	for i := range size/16 - 1 {
		c.put(denyKey{key: "more " + strconv.Itoa(i)}, live, later)
	}
	if n := c.len(); n != size {
		t.Errorf("%d entries once refilled, want %d", n, size)
	}
}
