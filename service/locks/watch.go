package locks

// Watching a name without holding it: a stream of its public state and of
// each change to it. One watcher machine serves every primitive: per
// instance and per watched name, one hub holds ONE listener on the name's
// wake-up channel (the shared subscriber's) and ONE state reader, and every
// watch of that name fans out from it in process, so a change costs the
// same Redis work (one inspect, and one read of the lost-lease records when
// a holder is gone) whatever the number of watchers. A primitive plugs in
// by supplying a watchable: its state reader and, when its events are not
// a lease's, its own diff.

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// The events of a watch stream.
const (
	// WatchState carries the name's whole public state (State): first on
	// every stream, and again whenever a change was not seen as events
	// (a lease granted and gone between two reads).
	WatchState = "state"
	// WatchAcquired: a lease with a new fence is held.
	WatchAcquired = "acquired"
	// WatchReleased: a lease was released before its TTL ran out.
	WatchReleased = "released"
	// WatchExpired: a lease ended at its TTL without a release.
	WatchExpired = "expired"
	// WatchLost: a keep-alive lease was lost; Reason says why (LostExpired,
	// "max_hold", "heartbeat_missed").
	WatchLost = "lost"
	// WatchForceReleased: an administrator force-released the lease.
	WatchForceReleased = "force-released"
	// WatchElected: an election has a leader with a new term (Fence).
	WatchElected = "elected"
	// WatchProclaimed: an election's leader set a new value, in the same
	// term.
	WatchProclaimed = "proclaimed"
	// WatchVacant: an election's leader of term Fence is gone; Reason says
	// why when it did not resign (LostExpired, LostForceReleased, "max_hold",
	// "heartbeat_missed").
	WatchVacant = "vacant"
)

// watchBuffer is how many events a watch may have waiting for its reader
// (a pointer each: an event is shared by every watch of its name, so a
// watch costs its buffer's 512 bytes, not a copy of each event); a watch
// that falls further behind is ended (Events closes, Overflowed reports
// true), and its client, reconnecting with the last id it read, gets a
// fresh state.
const watchBuffer = 64

// maxEventsPerChange is the most events one read of a name's state is told
// as: a change of more leases at once (a force-release of a semaphore's
// many holders) is told as one WatchState, so a burst never overflows a
// watch that keeps up.
const maxEventsPerChange = 16

// WatchHolder is a lease as a watch stream describes it: never its token.
type WatchHolder struct {
	Fence     int64
	Owner     string
	Mode      RWMode    // a read/write lock's lease
	Count     int64     // a semaphore's lease: its permits
	Value     string    // an election's leader: its value
	Since     time.Time // an election's leader: when its term began (Redis clock)
	TTL       time.Duration
	ExpiresAt time.Time // Redis clock
}

// WatchEvent is one event of a watch stream. ID identifies the name's
// state after the event (see stateID): equal ids mean the same holders and
// the same last fence.
type WatchEvent struct {
	Type   string // one of the Watch* events
	ID     string
	Fence  int64        // the lease the event is about (its holder's)
	Holder *WatchHolder // the lease the event is about; nil for WatchState
	Reason string       // WatchLost: why
	// State is the public state (LockState, RWState or SemaphoreState,
	// read without a token) for WatchState.
	State any

	enc *eventEncoding // set on the events a hub sends (see Encoded)
}

// eventEncoding is an event's encoding, made once for all its watches.
type eventEncoding struct {
	once sync.Once
	b    []byte
}

// Encoded returns encode's result, calling it once for every watch of the
// event's name: an event is shared by them, so a change is encoded once
// however many watch it. On an event not from a Watch, it calls encode.
func (e *WatchEvent) Encoded(encode func() []byte) []byte {
	if e.enc == nil {
		return encode()
	}
	e.enc.once.Do(func() { e.enc.b = encode() })
	return e.enc.b
}

// watchSnapshot is one read of a name's public state.
type watchSnapshot struct {
	state   any
	holders []WatchHolder // by fence, ascending
	last    int64         // the name's last fence: the greatest it issued that the state shows
	at      time.Time     // when it was read (Redis clock)
	tag     string        // what else the state's id covers: an election leader's value
	// partial: more leases are held than the read listed (maxWatchedLeases),
	// so a diff cannot tell each change: a change is told as a state.
	partial bool
}

// watchable is what a primitive supplies to be watched: its kind (naming
// its keys and channel), its state reader, and its diff (nil: a lease's,
// leaseDiff). A diff returns the events that lead from prev to next, each
// with the id of the state after it; lost says why a lease of a fence
// ended, when a record says so.
type watchable struct {
	kind kind
	read func(ctx context.Context, s *Service, k lockKeys) (watchSnapshot, error)
	diff func(prev, next watchSnapshot, lost func(fence int64) string) []WatchEvent
}

// watchables are the primitives that can be watched, by label.
var watchables = map[string]watchable{
	kindMutex.label(): {kind: kindMutex, read: readLockSnapshot},
	kindRW.label():    {kind: kindRW, read: readRWSnapshot},
	kindSem.label():   {kind: kindSem, read: readSemSnapshot},
	kindEl.label():    {kind: kindEl, read: readElectionSnapshot, diff: electionDiff},
}

// Watch is one watch of a name: its events, in order, until Close, the
// service's Close, or its reader falling watchBuffer events behind. The
// events are shared with the other watches of the name: read them only.
type Watch struct {
	hub        *watchHub
	c          chan *WatchEvent
	lastID     string // the id the client last saw: no first state when it is current
	started    bool   // the first state was sent (or skipped as current)
	overflowed bool
	closed     bool
}

// Events delivers the watch's events; it is closed when the watch ends.
func (w *Watch) Events() <-chan *WatchEvent { return w.c }

// Overflowed reports, once Events is closed, whether the watch ended
// because its reader fell behind.
func (w *Watch) Overflowed() bool {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.overflowed
}

// Close ends the watch. When it was its name's last on this instance, the
// name's hub stops and leaves the channel. It is safe to call twice.
func (w *Watch) Close() {
	h := w.hub
	s := h.s
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drop(w)
	if len(h.watches) == 0 && s.hubs[h.k.channel] == h {
		delete(s.hubs, h.k.channel)
		s.watchMetrics.names.Dec()
		h.cancel()
	}
}

// Watch watches name of primitive kind ("lock", "rwlock" or "semaphore")
// in the namespace of the tenant ctx acts for: its first event is a
// WatchState with the current public state, unless lastID (a WatchEvent's
// ID a client saw before) is that state's id, then one event per change.
// The watch lives past ctx until Close. Returns a *ValidationError for
// another kind or a bad name, or an error wrapping ErrUnavailable after
// the service was closed.
func (s *Service) Watch(ctx context.Context, kind, name, lastID string) (*Watch, error) {
	wa, ok := watchables[kind]
	if !ok {
		return nil, invalid("kind", "oneof", "kind must be lock, rwlock, semaphore or election")
	}
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	k := s.keysIn(ctx, wa.kind, name)
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	if s.watchClosed {
		return nil, fmt.Errorf("watch %s: %w: %w", name, store.ErrUnavailable, errClosed)
	}
	h := s.hubs[k.channel]
	if h == nil {
		hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		h = &watchHub{s: s, k: k, wa: wa, cancel: cancel, watches: map[*Watch]struct{}{}, label: kind}
		s.hubs[k.channel] = h
		s.watchMetrics.names.Inc()
		go h.run(hctx)
	}
	w := &Watch{hub: h, c: make(chan *WatchEvent, watchBuffer), lastID: lastID}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.watches[w] = struct{}{}
	s.watchMetrics.watches.Inc()
	if h.snap != nil {
		h.start(w)
	}
	return w, nil
}

// Watches reports the names this instance watches (one hub each) and the
// watches on them.
func (s *Service) Watches() (names, watches int) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	for _, h := range s.hubs {
		h.mu.Lock()
		watches += len(h.watches)
		h.mu.Unlock()
	}
	return len(s.hubs), watches
}

// closeWatches ends every watch: the service is closing.
func (s *Service) closeWatches() {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	s.watchClosed = true
	for key, h := range s.hubs {
		h.mu.Lock()
		for w := range h.watches {
			h.drop(w)
		}
		h.mu.Unlock()
		h.cancel()
		delete(s.hubs, key)
		s.watchMetrics.names.Dec()
	}
}

// watchHub is one watched name on this instance: its listener, its last
// read state and its watches.
type watchHub struct {
	s      *Service
	k      lockKeys
	wa     watchable
	label  string
	cancel context.CancelFunc

	mu      sync.Mutex
	watches map[*Watch]struct{}
	snap    *watchSnapshot // nil until the first read
}

// run keeps the hub's state and tells its watches of each change until ctx
// ends: it re-reads the state on every message of the name's channel, when
// the subscription is confirmed (again, after a reconnect: messages may have
// been missed), at the earliest holder's expiry (plus a millisecond) and on
// every Config.WatchResync tick, so a missed message is healed by the next
// read.
func (h *watchHub) run(ctx context.Context) {
	l, err := h.s.sub.join(h.k.channel, true)
	if err != nil { // the service is closed
		return
	}
	defer l.leave(false)
	resync := time.NewTicker(h.s.cfg.WatchResync)
	defer resync.Stop()
	expiry := time.NewTimer(time.Hour)
	defer expiry.Stop()
	ready := l.Ready()
	for {
		if d, ok := h.refresh(ctx); ok {
			expiry.Reset(d)
		} else {
			expiry.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-ready:
			ready = nil
		case <-l.C():
		case <-resync.C:
		case <-expiry.C:
		}
	}
}

// refresh reads the state, tells the watches what changed and says when
// the earliest holder's lease ends (ok false when nothing is held). A
// failed read changes nothing: the next tick reads again.
func (h *watchHub) refresh(ctx context.Context) (time.Duration, bool) {
	next, err := h.wa.read(ctx, h.s, h.k)
	if err != nil {
		if ctx.Err() == nil {
			h.s.watchMetrics.readErrors.Inc()
		}
		return h.s.cfg.WatchResync, true
	}
	h.s.watchMetrics.reads.Inc()
	var lost map[int64]string
	lostOf := func(fence int64) string {
		if lost == nil {
			lost = h.s.lostFences(ctx, h.k)
		}
		return lost[fence]
	}
	h.mu.Lock()
	prev := h.snap
	var events []*WatchEvent
	if prev != nil {
		diff := h.wa.diff
		if diff == nil {
			diff = leaseDiff
		}
		var evs []WatchEvent
		if !prev.partial && !next.partial {
			evs = diff(*prev, next, lostOf)
		}
		for i := range evs {
			evs[i].enc = &eventEncoding{}
			events = append(events, &evs[i])
		}
		id := stateID(next)
		switch {
		case len(events) > maxEventsPerChange:
			events = []*WatchEvent{{Type: WatchState, ID: id, State: next.state, enc: &eventEncoding{}}}
		case len(events) == 0 && id != stateID(*prev) || len(events) > 0 && events[len(events)-1].ID != id:
			// Something changed that the events do not tell: say it all.
			events = append(events, &WatchEvent{Type: WatchState, ID: id, State: next.state, enc: &eventEncoding{}})
		}
	}
	h.snap = &next
	// Counted before they are sent: whoever has seen an event sees it
	// counted.
	for _, ev := range events {
		h.s.watchMetrics.events.WithLabelValues(h.label, ev.Type).Inc()
	}
	for w := range h.watches {
		if !w.started {
			h.start(w)
			continue
		}
		for _, ev := range events {
			h.send(w, ev)
		}
	}
	h.mu.Unlock()
	if len(next.holders) == 0 {
		return 0, false
	}
	soonest := next.holders[0].TTL
	for _, hl := range next.holders[1:] {
		soonest = min(soonest, hl.TTL)
	}
	return soonest + time.Millisecond, true
}

// start sends w its first state, unless the client's last id is the
// current state's. Called with h.mu held and h.snap set.
func (h *watchHub) start(w *Watch) {
	w.started = true
	if id := stateID(*h.snap); id != w.lastID {
		h.send(w, &WatchEvent{Type: WatchState, ID: id, State: h.snap.state})
	}
}

// send gives w one event, ending it when its buffer is full. Called with
// h.mu held.
func (h *watchHub) send(w *Watch, ev *WatchEvent) {
	if w.closed {
		return
	}
	select {
	case w.c <- ev:
	default:
		w.overflowed = true
		h.s.watchMetrics.overflows.Inc()
		h.drop(w)
	}
}

// drop ends w and removes it from the hub. Called with h.mu held.
func (h *watchHub) drop(w *Watch) {
	if w.closed {
		return
	}
	w.closed = true
	close(w.c)
	delete(h.watches, w)
	h.s.watchMetrics.watches.Dec()
}

// leaseDiff is a lease primitive's diff: the leases gone (by fence, in
// fence order) are each released, expired, lost or force-released, then
// the new leases are each acquired.
func leaseDiff(prev, next watchSnapshot, lost func(fence int64) string) []WatchEvent {
	held := map[int64]bool{}
	for _, hl := range next.holders {
		held[hl.Fence] = true
	}
	had := map[int64]bool{}
	// The events' states keep prev's tag, so that a change the tag covers
	// (a semaphore's capacity, resized) leaves the last event's id not the
	// state's. A capacity set by a first lease, or gone with the last, is
	// no change of its own: it means something only while held.
	cur := watchSnapshot{holders: slices.Clone(prev.holders), last: prev.last, tag: prev.tag}
	if len(prev.holders) == 0 || len(next.holders) == 0 {
		cur.tag = next.tag
	}
	var events []WatchEvent
	for _, hl := range prev.holders {
		had[hl.Fence] = true
		if held[hl.Fence] {
			continue
		}
		ev := WatchEvent{Type: WatchReleased, Fence: hl.Fence, Holder: &hl}
		switch reason := lost(hl.Fence); {
		case reason == LostForceReleased:
			// A force-release bumps the fence: the state after it
			// has the next state's last fence.
			ev.Type = WatchForceReleased
			cur.last = max(cur.last, next.last)
		case reason != "":
			ev.Type, ev.Reason = WatchLost, reason
		case !hl.ExpiresAt.After(next.at):
			ev.Type = WatchExpired
		}
		cur.holders = slices.DeleteFunc(cur.holders, func(c WatchHolder) bool { return c.Fence == hl.Fence })
		ev.ID = stateID(cur)
		events = append(events, ev)
	}
	for _, hl := range next.holders {
		if had[hl.Fence] {
			continue
		}
		cur.holders = append(cur.holders, hl)
		cur.last = max(cur.last, hl.Fence)
		events = append(events, WatchEvent{Type: WatchAcquired, Fence: hl.Fence, Holder: &hl, ID: stateID(cur)})
	}
	// A lease that came and went between two reads leaves next.last above
	// cur.last: the last event's id is then not the state's, and refresh
	// adds a state event.
	return events
}

// stateID identifies a name's state as its events see it: the name's last
// fence and a hash of its holders' fences (and of its tag, an election
// leader's value, when it has one), so it is the same on every instance
// reading the same state, and a watcher costs no Redis key.
func stateID(s watchSnapshot) string {
	fences := make([]int64, len(s.holders))
	for i, hl := range s.holders {
		fences[i] = hl.Fence
	}
	slices.Sort(fences)
	h := fnv.New64a()
	var b [8]byte
	for _, f := range fences {
		binary.BigEndian.PutUint64(b[:], uint64(f))
		_, _ = h.Write(b[:])
	}
	id := strconv.FormatInt(s.last, 10) + "-" + strconv.Itoa(len(fences)) + "-" + strconv.FormatUint(h.Sum64(), 36)
	if s.tag != "" {
		t := fnv.New64a()
		_, _ = t.Write([]byte(s.tag))
		id += "-" + strconv.FormatUint(t.Sum64(), 36)
	}
	return id
}

// electionDiff is an election's diff: a leader gone is vacant (with the
// reason its lost-lease record gives, or expired when its lease ran out;
// none when it resigned), a leader of a new term is elected, and a new
// value in the same term is proclaimed.
func electionDiff(prev, next watchSnapshot, lost func(fence int64) string) []WatchEvent {
	var was, is *WatchHolder
	if len(prev.holders) > 0 {
		was = &prev.holders[0]
	}
	if len(next.holders) > 0 {
		is = &next.holders[0]
	}
	if was != nil && is != nil && was.Fence == is.Fence {
		if was.Value == is.Value {
			return nil
		}
		return []WatchEvent{{Type: WatchProclaimed, Fence: is.Fence, Holder: is, ID: stateID(next)}}
	}
	var events []WatchEvent
	last := prev.last
	if was != nil {
		ev := WatchEvent{Type: WatchVacant, Fence: was.Fence, Holder: was}
		switch reason := lost(was.Fence); {
		case reason == LostForceReleased:
			// A removal bumps the term counter: the state after it has
			// the next state's last term.
			ev.Reason = reason
			last = max(last, next.last)
		case reason != "":
			ev.Reason = reason
		case !was.ExpiresAt.After(next.at):
			ev.Reason = LostExpired
		}
		ev.ID = stateID(watchSnapshot{last: last})
		events = append(events, ev)
	}
	if is != nil {
		// A term that came and went between two reads leaves next.last
		// above this event's term: refresh then adds a state event.
		cur := watchSnapshot{holders: []WatchHolder{*is}, last: max(last, is.Fence), tag: is.Value}
		events = append(events, WatchEvent{Type: WatchElected, Fence: is.Fence, Holder: is, ID: stateID(cur)})
	}
	return events
}

// readLockSnapshot reads an exclusive lock's public state.
func readLockSnapshot(ctx context.Context, s *Service, k lockKeys) (watchSnapshot, error) {
	st, err := s.Inspect(ctx, k.name, "")
	if err != nil {
		return watchSnapshot{}, err
	}
	snap := watchSnapshot{state: st, last: st.Fence, at: st.At}
	if st.Held {
		snap.holders = []WatchHolder{{Fence: st.Fence, Owner: st.Owner, TTL: st.TTL, ExpiresAt: st.ExpiresAt}}
	}
	return snap, nil
}

// readRWSnapshot reads a read/write lock's public state.
func readRWSnapshot(ctx context.Context, s *Service, k lockKeys) (watchSnapshot, error) {
	st, err := s.rwLock().inspectListing(ctx, k, "", maxWatchedLeases)
	if err != nil {
		return watchSnapshot{}, err
	}
	held := st.Readers
	if st.WriteHeld {
		held++
	}
	snap := heldSnapshot(st.Leases, st.LeasesTruncated, held, st.Fence, st.At, "")
	st.Leases, st.LeasesTruncated = listedLeases(st.Leases, st.LeasesTruncated)
	snap.state = st
	return snap, nil
}

// readSemSnapshot reads a semaphore's public state.
func readSemSnapshot(ctx context.Context, s *Service, k lockKeys) (watchSnapshot, error) {
	st, err := s.inspectSemaphore(ctx, k, "", maxWatchedLeases)
	if err != nil {
		return watchSnapshot{}, err
	}
	// The capacity is part of the state: a resize is told as a state.
	snap := heldSnapshot(st.Leases, st.LeasesTruncated, st.Holders, st.Fence, st.At, "p"+strconv.FormatInt(st.Permits, 10))
	st.Leases, st.LeasesTruncated = listedLeases(st.Leases, st.LeasesTruncated)
	snap.state = st
	return snap, nil
}

// readElectionSnapshot reads an election's public state: its leader is
// its one holder, the term its fence, and the value its tag.
func readElectionSnapshot(ctx context.Context, s *Service, k lockKeys) (watchSnapshot, error) {
	st, err := s.InspectElection(ctx, k.name, "")
	if err != nil {
		return watchSnapshot{}, err
	}
	snap := watchSnapshot{state: st, last: st.Term, at: st.At}
	if l := st.Leader; l != nil {
		snap.holders = []WatchHolder{{Fence: l.Term, Owner: l.Owner, Value: l.Value, Since: l.Since, TTL: l.TTL, ExpiresAt: l.ExpiresAt}}
		snap.tag = l.Value
	}
	return snap, nil
}

// heldSnapshot is the snapshot of a primitive with many holders, from the
// leases a read listed (at most maxWatchedLeases; truncated: more of the
// held ones are held), its last fence, the read's time and what else its
// state's id covers (tag). Its state is the caller's to set.
func heldSnapshot(leases []HeldLease, truncated bool, held, fence int64, at time.Time, tag string) watchSnapshot {
	snap := watchSnapshot{last: fence, at: at, tag: tag, partial: truncated}
	for _, l := range leases {
		snap.holders = append(snap.holders, WatchHolder{Fence: l.Fence, Owner: l.Owner, Mode: l.Mode, Count: l.Count,
			TTL: l.TTL, ExpiresAt: l.ExpiresAt})
		snap.last = max(snap.last, l.Fence)
	}
	slices.SortFunc(snap.holders, func(a, b WatchHolder) int { return cmp.Compare(a.Fence, b.Fence) })
	if truncated {
		// The leases past the listed ones are not seen one by one: the
		// id also covers how many are held, so a change among them still
		// changes it.
		snap.tag += "+" + strconv.FormatInt(held, 10)
	}
	return snap
}

// lostFences reads the reasons the leases of k ended, by fence, from its
// lost-lease records (see lib/lost.lua); a failed read knows none.
func (s *Service) lostFences(ctx context.Context, k lockKeys) map[int64]string {
	st, err := s.lostOf(ctx, k)
	out := map[int64]string{}
	if err != nil {
		return out
	}
	for _, l := range st.Leases {
		if _, seen := out[l.Fence]; !seen && l.Fence != 0 { // newest first
			out[l.Fence] = l.Reason
		}
	}
	return out
}

// watchMetrics are the watch machine's Prometheus collectors.
type watchMetrics struct {
	names      prometheus.Gauge
	watches    prometheus.Gauge
	reads      prometheus.Counter
	readErrors prometheus.Counter
	overflows  prometheus.Counter
	events     *prometheus.CounterVec // kind: lock, rwlock, semaphore, election; event: the Watch* events
}

func newWatchMetrics(reg prometheus.Registerer) *watchMetrics {
	return &watchMetrics{
		names:      gauge(reg, "latchkey_watch_names", "Names this instance watches, one state reader and subscription each."),
		watches:    gauge(reg, "latchkey_watch_streams", "Watch streams open on this instance."),
		reads:      counter(reg, "latchkey_watch_reads_total", "State reads of watched names."),
		readErrors: counter(reg, "latchkey_watch_read_errors_total", "State reads of watched names that failed (read again at the next tick)."),
		overflows:  counter(reg, "latchkey_watch_overflows_total", "Watch streams ended because their reader fell behind."),
		events: counterVec(reg, "latchkey_watch_events_total",
			"Watch events emitted per watched name, by kind (lock, rwlock, semaphore, election) and event.", "kind", "event"),
	}
}
