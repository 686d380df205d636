package locks_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/locks"
)

// newWatchService is a service on miniredis whose watched names are read
// again every few milliseconds, so a change made without a message (an
// expiry by FastForward, an acquisition) is seen at the next read.
func newWatchService(t *testing.T) (*locks.Service, func(d time.Duration)) {
	t.Helper()
	svc, m := newTestService(t, locks.Config{WatchResync: 5 * time.Millisecond})
	t.Cleanup(func() { _ = svc.Close() })
	now := t0
	return svc, func(d time.Duration) {
		now = now.Add(d)
		m.SetTime(now)
		m.FastForward(d)
	}
}

func mustWatch(t *testing.T, svc *locks.Service, kind, name, lastID string) *locks.Watch {
	t.Helper()
	w, err := svc.Watch(t.Context(), kind, name, lastID)
	if err != nil {
		t.Fatalf("Watch(%s, %q) = %v", kind, name, err)
	}
	t.Cleanup(w.Close)
	return w
}

// nextEvent is the watch's next event; not within a minute fails.
func nextEvent(t *testing.T, w *locks.Watch) *locks.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(time.Minute):
		t.Fatal("no watch event within a minute")
	}
	return nil
}

func wantEvent(t *testing.T, w *locks.Watch, typ string, fence int64) *locks.WatchEvent {
	t.Helper()
	ev := nextEvent(t, w)
	if ev.Type != typ || ev.Fence != fence {
		t.Fatalf("event = %s (fence %d), want %s (fence %d)", ev.Type, ev.Fence, typ, fence)
	}
	if ev.ID == "" {
		t.Errorf("%s event has no id", typ)
	}
	return ev
}

func TestWatchLockSeesEachChangeWithItsFence(t *testing.T) {
	svc, advance := newWatchService(t)
	w := mustWatch(t, svc, "lock", "orders", "")
	first := wantEvent(t, w, locks.WatchState, 0)
	if st, ok := first.State.(locks.LockState); !ok || st.Held || st.Name != "orders" {
		t.Fatalf("first state = %#v, want the free lock orders", first.State)
	}

	a := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: 10 * time.Second, Owner: "worker-a"})
	if ev := wantEvent(t, w, locks.WatchAcquired, a.Fence); ev.Holder == nil || ev.Holder.Owner != "worker-a" {
		t.Errorf("acquired holder = %+v, want worker-a's lease", ev.Holder)
	}
	if _, err := svc.Release(t.Context(), "orders", a.Token); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, w, locks.WatchReleased, a.Fence)

	b := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: 10 * time.Second})
	wantEvent(t, w, locks.WatchAcquired, b.Fence)
	if _, err := svc.ForceRelease(t.Context(), "orders"); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, w, locks.WatchForceReleased, b.Fence)

	advance(time.Second)
	c := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: time.Second})
	wantEvent(t, w, locks.WatchAcquired, c.Fence)
	advance(2 * time.Second)
	ev := wantEvent(t, w, locks.WatchExpired, c.Fence)
	if !(a.Fence < b.Fence && b.Fence < c.Fence) {
		t.Errorf("fences %d, %d, %d, want increasing", a.Fence, b.Fence, c.Fence)
	}

	// A watch that says it saw the current state gets nothing more; one
	// with an older id gets the state.
	current := mustWatch(t, svc, "lock", "orders", ev.ID)
	stale := mustWatch(t, svc, "lock", "orders", first.ID)
	wantEvent(t, stale, locks.WatchState, 0)
	d := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: 10 * time.Second})
	wantEvent(t, current, locks.WatchAcquired, d.Fence)
	wantEvent(t, stale, locks.WatchAcquired, d.Fence)
}

func TestWatchRWLockAndSemaphoreSeeEachLease(t *testing.T) {
	svc, _ := newWatchService(t)
	rw := mustWatch(t, svc, "rwlock", "docs", "")
	wantEvent(t, rw, locks.WatchState, 0)
	r1 := mustAcquireRW(t, svc, "docs", locks.AcquireRequest{Mode: locks.ModeRead, TTL: 10 * time.Second})
	if ev := wantEvent(t, rw, locks.WatchAcquired, r1.Fence); ev.Holder.Mode != locks.ModeRead {
		t.Errorf("acquired mode = %q, want read", ev.Holder.Mode)
	}
	r2 := mustAcquireRW(t, svc, "docs", locks.AcquireRequest{Mode: locks.ModeRead, TTL: 10 * time.Second})
	wantEvent(t, rw, locks.WatchAcquired, r2.Fence)
	if _, err := svc.ReleaseRW(t.Context(), "docs", r1.Token, ""); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, rw, locks.WatchReleased, r1.Fence)

	sem := mustWatch(t, svc, "semaphore", "pool", "")
	wantEvent(t, sem, locks.WatchState, 0)
	p := mustSem(t, svc, "pool", semReq(4, 3, 10*time.Second))
	if ev := wantEvent(t, sem, locks.WatchAcquired, p.Fence); ev.Holder.Count != 3 {
		t.Errorf("acquired count = %d, want 3", ev.Holder.Count)
	}
	if _, err := svc.ForceReleaseSemaphore(t.Context(), "pool"); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, sem, locks.WatchForceReleased, p.Fence)
}

func TestWatchOfOneNameSharesOneSubscription(t *testing.T) {
	svc, _ := newWatchService(t)
	var ws []*locks.Watch
	for range 3 {
		ws = append(ws, mustWatch(t, svc, "lock", "shared", ""))
	}
	mustWatch(t, svc, "lock", "other", "")
	if names, watches := svc.Watches(); names != 2 || watches != 4 {
		t.Errorf("Watches() = %d names, %d watches, want 2 and 4", names, watches)
	}
	for _, w := range ws {
		wantEvent(t, w, locks.WatchState, 0)
	}
	if channels, _ := svc.Subscriptions(); channels != 2 {
		t.Errorf("channels subscribed = %d, want 2 (one per watched name)", channels)
	}
	for _, w := range ws {
		w.Close()
		w.Close() // twice is harmless
	}
	if names, watches := svc.Watches(); names != 1 || watches != 1 {
		t.Errorf("after closing: Watches() = %d names, %d watches, want 1 and 1", names, watches)
	}
	waitFor(t, "the closed name's channel to be left", func() bool {
		channels, _ := svc.Subscriptions()
		return channels == 1
	})
}

func TestWatchRefusesABadKindOrName(t *testing.T) {
	svc, _ := newWatchService(t)
	for _, tt := range []struct{ kind, name string }{{"mutex", "a"}, {"lock", ""}, {"lock", "a b"}} {
		if _, err := svc.Watch(t.Context(), tt.kind, tt.name, ""); err == nil {
			t.Errorf("Watch(%q, %q) = nil error, want a validation error", tt.kind, tt.name)
		}
	}
	if names, _ := svc.Watches(); names != 0 {
		t.Errorf("names watched after refusals = %d, want 0", names)
	}
}

func TestWatchEndsWhenTheServiceCloses(t *testing.T) {
	svc, _ := newWatchService(t)
	w := mustWatch(t, svc, "lock", "orders", "")
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	for range w.Events() { //nolint:revive // drain until closed
	}
	if _, err := svc.Watch(t.Context(), "lock", "orders", ""); err == nil {
		t.Error("Watch after Close = nil error, want unavailable")
	}
}

func TestLeaseDiffNamesHowEachLeaseEnded(t *testing.T) {
	at := t0.Add(time.Minute)
	holder := func(fence int64, expires time.Time) locks.WatchHolder {
		return locks.WatchHolder{Fence: fence, ExpiresAt: expires}
	}
	later, earlier := at.Add(time.Second), at.Add(-time.Second)
	tests := []struct {
		desc       string
		prev, next []locks.WatchHolder
		last       int64
		lost       map[int64]string
		want       []string
	}{
		{"nothing changed", []locks.WatchHolder{holder(1, later)}, []locks.WatchHolder{holder(1, later)}, 1, nil, nil},
		{"released before its end", []locks.WatchHolder{holder(1, later)}, nil, 1, nil, []string{"released 1"}},
		{"gone at its end", []locks.WatchHolder{holder(1, earlier)}, nil, 1, nil, []string{"expired 1"}},
		{"force-released", []locks.WatchHolder{holder(1, later)}, nil, 1,
			map[int64]string{1: locks.LostForceReleased}, []string{"force-released 1"}},
		{"a keep-alive lease lost", []locks.WatchHolder{holder(1, later)}, nil, 1,
			map[int64]string{1: "heartbeat_missed"}, []string{"lost 1 heartbeat_missed"}},
		{"handed on", []locks.WatchHolder{holder(1, later)}, []locks.WatchHolder{holder(2, later)}, 2, nil,
			[]string{"released 1", "acquired 2"}},
		{"a reader more", []locks.WatchHolder{holder(1, later)}, []locks.WatchHolder{holder(1, later), holder(3, later)}, 3, nil,
			[]string{"acquired 3"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			prev := locks.WatchSnapshot{Holders: tt.prev, Last: 1, At: t0}
			next := locks.WatchSnapshot{Holders: tt.next, Last: tt.last, At: at}
			events := locks.LeaseDiff(prev, next, tt.lost)
			var got []string
			for _, ev := range events {
				s := fmt.Sprintf("%s %d", ev.Type, ev.Fence)
				if ev.Reason != "" {
					s += " " + ev.Reason
				}
				got = append(got, s)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events mismatch (-want +got):\n%s", diff)
			}
			if len(events) > 0 && events[len(events)-1].ID != locks.StateID(next) {
				t.Errorf("last event's id %s, want the next state's %s", events[len(events)-1].ID, locks.StateID(next))
			}
		})
	}
}

func TestStateIDChangesWithALeaseUnseen(t *testing.T) {
	// A lease granted and gone between two reads leaves the same holders
	// and a later last fence: another id, so the watch sends the state.
	free := locks.WatchSnapshot{Last: 5}
	after := locks.WatchSnapshot{Last: 9}
	if locks.StateID(free) == locks.StateID(after) {
		t.Errorf("ids of last fences 5 and 9 are both %s", locks.StateID(free))
	}
	if locks.LeaseDiff(free, after, nil) != nil {
		t.Error("diff of holders unchanged has events")
	}
}

// TestWatchAtScale: 10,000 watches of 100 names share 100 subscriptions and
// 100 state readers, and every watch gets the change of its name, read
// from the scripts' messages alone (no periodic read).
func TestWatchAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 watches")
	}
	const names, perName = 100, 100
	svc, _ := newTestService(t, locks.Config{WatchResync: time.Hour})
	t.Cleanup(func() { _ = svc.Close() })
	watches := make([][]*locks.Watch, names)
	for n := range names {
		for range perName {
			watches[n] = append(watches[n], mustWatch(t, svc, "lock", fmt.Sprintf("name-%d", n), ""))
		}
	}
	for n := range names {
		for _, w := range watches[n] {
			wantEvent(t, w, locks.WatchState, 0)
		}
	}
	if hubs, ws := svc.Watches(); hubs != names || ws != names*perName {
		t.Fatalf("Watches() = %d names, %d watches; want %d and %d", hubs, ws, names, names*perName)
	}
	waitFor(t, "every name's channel to be subscribed", func() bool {
		channels, listeners := svc.Subscriptions()
		return channels == names && listeners == names // one listener per name, not per watch
	})
	for n := range names {
		l := mustAcquire(t, svc, fmt.Sprintf("name-%d", n), locks.AcquireRequest{TTL: time.Minute})
		for _, w := range watches[n] {
			wantEvent(t, w, locks.WatchAcquired, l.Fence)
		}
	}
}

// TestWatchTellsABurstAsOneState: a change of more leases than one read
// tells as events (a force-release of 20 semaphore holders) is one state
// event, so a watch that keeps up is never ended by a burst.
func TestWatchTellsABurstAsOneState(t *testing.T) {
	svc, _ := newWatchService(t)
	w := mustWatch(t, svc, "semaphore", "crowd", "")
	wantEvent(t, w, locks.WatchState, 0)
	var last int64
	for range 20 {
		last = mustSem(t, svc, "crowd", semReq(20, 1, time.Minute)).Fence
	}
	for { // the 20 grants, as events or as states
		ev := nextEvent(t, w)
		if st, ok := ev.State.(locks.SemaphoreState); ev.Fence == last || ok && st.Holders == 20 {
			break
		}
	}
	if _, err := svc.ForceReleaseSemaphore(t.Context(), "crowd"); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, w)
	if st, ok := ev.State.(locks.SemaphoreState); ev.Type != locks.WatchState || !ok || st.Holders != 0 {
		t.Fatalf("after 20 leases force-released: %s %+v, want one state with no holder", ev.Type, ev.State)
	}
	l := mustSem(t, svc, "crowd", semReq(20, 1, time.Minute))
	wantEvent(t, w, locks.WatchAcquired, l.Fence)
}

// TestWatchEventIsEncodedOncePerChange: the watches of a name share each
// change's event, so its encoding is made once however many watch it.
func TestWatchEventIsEncodedOncePerChange(t *testing.T) {
	svc, _ := newWatchService(t)
	w1, w2 := mustWatch(t, svc, "lock", "enc", ""), mustWatch(t, svc, "lock", "enc", "")
	wantEvent(t, w1, locks.WatchState, 0)
	wantEvent(t, w2, locks.WatchState, 0)
	l := mustAcquire(t, svc, "enc", locks.AcquireRequest{TTL: time.Minute})
	e1, e2 := wantEvent(t, w1, locks.WatchAcquired, l.Fence), wantEvent(t, w2, locks.WatchAcquired, l.Fence)
	calls := 0
	encode := func() []byte { calls++; return []byte("frame") }
	if string(e1.Encoded(encode)) != "frame" || string(e2.Encoded(encode)) != "frame" || calls != 1 {
		t.Errorf("encoded %d times for two watches, want once", calls)
	}
}

// An election's watch tells each leader with its term and value: elected,
// proclaimed (same term, new value, a new id), vacant on resignation (no
// reason), on removal (force_released) and on expiry (expired), each new
// term greater than the one before.
func TestWatchElectionSeesEachLeaderWithItsTerm(t *testing.T) {
	svc, advance := newWatchService(t)
	ctx := t.Context()
	campaign := func(value string, ttl time.Duration) locks.Lease {
		t.Helper()
		l, err := svc.Campaign(ctx, "primary", locks.AcquireRequest{TTL: ttl, Value: value, Owner: "node-" + value})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	w := mustWatch(t, svc, "election", "primary", "")
	if st, ok := wantEvent(t, w, locks.WatchState, 0).State.(locks.ElectionState); !ok || st.Leader != nil || st.Name != "primary" {
		t.Fatalf("first state = %#v, want the vacant election primary", st)
	}

	a := campaign("a", 10*time.Second)
	elected := wantEvent(t, w, locks.WatchElected, a.Fence)
	if h := elected.Holder; h == nil || h.Value != "a" || h.Owner != "node-a" {
		t.Fatalf("elected holder = %+v, want a's leadership", h)
	}
	if _, err := svc.Proclaim(ctx, "primary", a.Token, "a2"); err != nil {
		t.Fatal(err)
	}
	proclaimed := wantEvent(t, w, locks.WatchProclaimed, a.Fence)
	if proclaimed.Holder.Value != "a2" || proclaimed.ID == elected.ID {
		t.Fatalf("proclaimed value %q id %q (elected's %q), want a2 with a new id", proclaimed.Holder.Value, proclaimed.ID, elected.ID)
	}
	if _, err := svc.Resign(ctx, "primary", a.Token); err != nil {
		t.Fatal(err)
	}
	if ev := wantEvent(t, w, locks.WatchVacant, a.Fence); ev.Reason != "" {
		t.Errorf("vacant on resignation: reason %q, want none", ev.Reason)
	}

	b := campaign("b", 10*time.Second)
	wantEvent(t, w, locks.WatchElected, b.Fence)
	if _, err := svc.ForceResign(ctx, "primary"); err != nil {
		t.Fatal(err)
	}
	if ev := wantEvent(t, w, locks.WatchVacant, b.Fence); ev.Reason != locks.LostForceReleased {
		t.Errorf("vacant on removal: reason %q, want %s", ev.Reason, locks.LostForceReleased)
	}

	advance(time.Second)
	c := campaign("c", time.Second)
	wantEvent(t, w, locks.WatchElected, c.Fence)
	advance(2 * time.Second)
	if ev := wantEvent(t, w, locks.WatchVacant, c.Fence); ev.Reason != locks.LostExpired {
		t.Errorf("vacant on expiry: reason %q, want %s", ev.Reason, locks.LostExpired)
	}
	if !(a.Fence < b.Fence && b.Fence < c.Fence) {
		t.Errorf("terms %d, %d, %d, want increasing", a.Fence, b.Fence, c.Fence)
	}
}

// TestWatchFollowsEveryLeaseOfABigSemaphore: a watch tells each lease of a
// semaphore one by one also past the MaxListedLeases its state lists: 150
// grants are 150 acquired events and a release of any is a released event,
// while the state a new watch starts with lists MaxListedLeases of them and
// says more are held. A resize of the semaphore is told as a state with
// the new permits.
func TestWatchFollowsEveryLeaseOfABigSemaphore(t *testing.T) {
	svc, _ := newWatchService(t)
	w := mustWatch(t, svc, "semaphore", "big", "")
	wantEvent(t, w, locks.WatchState, 0)
	var leases []locks.SemaphoreLease
	for range locks.MaxListedLeases + 50 {
		l := mustSem(t, svc, "big", semReq(500, 1, time.Minute))
		wantEvent(t, w, locks.WatchAcquired, l.Fence)
		leases = append(leases, l)
	}
	for _, l := range []locks.SemaphoreLease{leases[0], leases[len(leases)-1]} {
		if _, err := svc.ReleaseSemaphore(t.Context(), "big", l.Token); err != nil {
			t.Fatal(err)
		}
		wantEvent(t, w, locks.WatchReleased, l.Fence)
	}
	st, ok := wantEvent(t, mustWatch(t, svc, "semaphore", "big", ""), locks.WatchState, 0).State.(locks.SemaphoreState)
	if !ok || len(st.Leases) != locks.MaxListedLeases || !st.LeasesTruncated || st.Holders != int64(len(leases)-2) {
		t.Fatalf("a new watch's state lists %d leases (truncated %v) of %d holders, want %d, truncated, of %d",
			len(st.Leases), st.LeasesTruncated, st.Holders, locks.MaxListedLeases, len(leases)-2)
	}
	if _, err := svc.SetSemaphorePermits(t.Context(), "big", 600); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, w)
	if st, ok := ev.State.(locks.SemaphoreState); ev.Type != locks.WatchState || !ok || st.Permits != 600 {
		t.Fatalf("after a resize: %s %+v, want a state with 600 permits", ev.Type, ev.State)
	}
}

// TestWatchPastItsLeaseBoundTellsStates: a semaphore with more leases than
// a watch follows one by one (1,000) tells each change as a state, never
// silently: a release is a state with one holder fewer.
func TestWatchPastItsLeaseBoundTellsStates(t *testing.T) {
	svc, _ := newWatchService(t)
	var last locks.SemaphoreLease
	const held = 1001
	for range held {
		last = mustSem(t, svc, "crowded", semReq(2000, 1, time.Minute))
	}
	w := mustWatch(t, svc, "semaphore", "crowded", "")
	if st, ok := wantEvent(t, w, locks.WatchState, 0).State.(locks.SemaphoreState); !ok || st.Holders != held {
		t.Fatalf("first state %+v, want %d holders", st, held)
	}
	if _, err := svc.ReleaseSemaphore(t.Context(), "crowded", last.Token); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, w)
	if st, ok := ev.State.(locks.SemaphoreState); ev.Type != locks.WatchState || !ok || st.Holders != held-1 {
		t.Fatalf("after a release: %s %+v, want a state of %d holders", ev.Type, ev.State, held-1)
	}
}
