package ratelimit

import (
	"strconv"
	"testing"
	"time"
)

// A key denied 300 times among 10,000 keys denied once each comes first,
// with its exact count: the sketch keeps every key denied more often than
// one in TopKeysCapacity denials, and never holds more than its capacity.
func TestTopKeysFindsTheHotKeyAmongManyDeniedOnce(t *testing.T) {
	var tk topKeys
	now := time.Date(2026, 11, 23, 4, 0, 0, 0, time.UTC)
	hot := 0
	for i := range 10_000 {
		if i%33 == 0 && hot < 300 {
			tk.add("hot", now)
			hot++
		}
		tk.add("client-"+strconv.Itoa(i), now)
		if n := tk.size(); n > TopKeysCapacity {
			t.Fatalf("after %d keys the sketch holds %d, above its capacity %d", i+1, n, TopKeysCapacity)
		}
	}
	if hot != 300 {
		t.Fatalf("sent %d hot denials, want 300", hot)
	}
	if n := tk.size(); n != TopKeysCapacity {
		t.Errorf("sketch holds %d keys, want its capacity %d", n, TopKeysCapacity)
	}
	top := tk.top(now, 3)
	if len(top) == 0 || top[0] != (KeyCount{Key: "hot", Denied: 300}) {
		t.Fatalf("top = %v, want hot with 300 denials first", top)
	}
	for _, kc := range top[1:] {
		if kc.Denied != 1 {
			t.Errorf("top lists %v: a key denied once must be vouched for once at most", kc)
		}
	}
}

// With no more keys than the capacity every count is exact, and ties are
// listed by key.
func TestTopKeysCountsExactlyUnderCapacity(t *testing.T) {
	var tk topKeys
	now := time.Date(2026, 11, 23, 4, 0, 0, 0, time.UTC)
	for i := range TopKeysCapacity {
		for range i % 3 {
			tk.add("k"+strconv.Itoa(i), now)
		}
	}
	got := tk.top(now, MaxTopKeys)
	// i%3 == 0 never denied; 1 and 2: about a third of the keys each.
	if want := 2 * TopKeysCapacity / 3; len(got) < want-1 || len(got) > want+1 {
		t.Fatalf("%d keys listed, want about %d", len(got), want)
	}
	for i, kc := range got {
		n, _ := strconv.Atoi(kc.Key[1:])
		if kc.Denied != int64(n%3) {
			t.Errorf("%s: %d denials, want %d", kc.Key, kc.Denied, n%3)
		}
		if i > 0 && (got[i-1].Denied < kc.Denied || got[i-1].Denied == kc.Denied && got[i-1].Key > kc.Key) {
			t.Errorf("%v listed before %v", got[i-1], kc)
		}
	}
}

// The sketch reflects the last few minutes: a period's denials stay one
// more period, then drop out; after two quiet periods nothing is left.
func TestTopKeysForgetsOldPeriods(t *testing.T) {
	var tk topKeys
	t0 := time.Date(2026, 11, 23, 4, 0, 0, 0, time.UTC)
	tk.add("old", t0)
	tk.add("old", t0)
	tk.add("new", t0.Add(TopKeysPeriod))
	if got := tk.top(t0.Add(TopKeysPeriod), 10); len(got) != 2 || got[0] != (KeyCount{"old", 2}) || got[1] != (KeyCount{"new", 1}) {
		t.Fatalf("one period later: %v, want old (2) then new (1)", got)
	}
	if got := tk.top(t0.Add(2*TopKeysPeriod), 10); len(got) != 1 || got[0] != (KeyCount{"new", 1}) {
		t.Fatalf("two periods later: %v, want new only", got)
	}
	if got := tk.top(t0.Add(4*TopKeysPeriod), 10); len(got) != 0 {
		t.Fatalf("after two quiet periods: %v, want nothing", got)
	}
	if n := tk.size(); n != 0 {
		t.Errorf("after two quiet periods the sketch holds %d keys", n)
	}
}
