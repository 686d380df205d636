package locks_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// A new grant's fence is max(counter + 1, Redis TIME in µs): the grant's
// time while the clock moves on, one more than the last fence while it does
// not, and above every fence issued before when the counter went back (a
// partial loss) but the clock did not.
func TestFenceIsCounterOrClock(t *testing.T) {
	svc, m := newTestService(t, locks.Config{}, store.Config{KeyPrefix: "lk:"})
	const counter = "lk:fence:{orders}"
	grant := func() int64 {
		t.Helper()
		l := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
		if _, err := svc.Release(t.Context(), "orders", l.Token); err != nil {
			t.Fatal(err)
		}
		return l.Fence
	}
	at := func(d time.Duration) int64 { return t0.Add(d).UnixMicro() }

	steps := []struct {
		desc   string
		before func()
		want   func(last int64) int64
	}{
		{"the clock stood still: counter + 1", nil, func(last int64) int64 { return last + 1 }},
		{"the clock moved on: the clock", func() { m.SetTime(t0.Add(time.Second)) }, func(int64) int64 { return at(time.Second) }},
		{"partial loss, the counter went back: the clock", func() {
			m.Set(counter, strconv.FormatInt(at(0), 10))
			m.SetTime(t0.Add(2 * time.Second))
		}, func(int64) int64 { return at(2 * time.Second) }},
		{"the clock stepped back: counter + 1", func() { m.SetTime(t0.Add(-time.Hour)) }, func(last int64) int64 { return last + 1 }},
	}
	last := grant()
	if last < at(0) {
		t.Fatalf("first fence = %d, want at least Redis TIME in µs %d", last, at(0))
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		want := s.want(last)
		if got := grant(); got != want || got <= last {
			t.Fatalf("%s: fence = %d, want %d (the last was %d)", s.desc, got, want, last)
		}
		last = want
	}
	if ttl := m.TTL(counter); ttl != svc.Config().FenceTTL {
		t.Errorf("fence counter TTL = %s, want the fence TTL, refreshed on grant", ttl)
	}
}

// After a force-release the last fence is above the evicted holder's, also
// when the counter had gone back, and the next grant is above both.
func TestForceReleaseBumpAfterPartialLoss(t *testing.T) {
	svc, m := newTestService(t, locks.Config{}, store.Config{KeyPrefix: "lk:"})
	first := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
	if _, err := svc.Release(t.Context(), "orders", first.Token); err != nil {
		t.Fatal(err)
	}
	m.SetTime(t0.Add(time.Second))
	evicted := mustAcquire(t, svc, "orders", locks.AcquireRequest{})
	m.Set("lk:fence:{orders}", strconv.FormatInt(first.Fence, 10))
	m.SetTime(t0.Add(2 * time.Second))
	if removed, err := svc.ForceRelease(t.Context(), "orders"); err != nil || !removed {
		t.Fatalf("ForceRelease = %v, %v", removed, err)
	}
	bumped := mustInspect(t, svc, "orders", "").Fence
	if bumped <= evicted.Fence {
		t.Errorf("last fence after force-release = %d, want above the evicted %d", bumped, evicted.Fence)
	}
	if next := mustAcquire(t, svc, "orders", locks.AcquireRequest{}); next.Fence <= bumped {
		t.Errorf("next fence = %d, want above the bumped %d", next.Fence, bumped)
	}
}
