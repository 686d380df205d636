package locks

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// Hints a listener may receive. A release publishes hintReleased (a
// read/write lock's last reader hintDrained, which only a writer can use), a
// force-release hintForced, a departing fair waiter hintLeft, a renew that
// shortened the lease hintShortened; hintResubscribed is delivered after the
// subscriber connection was re-established, because messages published
// while it was down are lost. Every grant publishes a notice that starts
// with hintAcquired (see parseAcquired): not a hint to try again, as the new
// lease blocks the waiters too, but when that lease ends, which an expiry
// does not publish.
const (
	hintReleased     = "released"
	hintDrained      = "drained"
	hintForced       = "forced"
	hintLeft         = "left"
	hintShortened    = "shortened"
	hintResubscribed = "resubscribed"
	hintHandedOn     = "handed-on"
	hintAcquired     = "acquired"
	// hintGranted wakes a semaphore's waiter whose count fits in the
	// permits a grant left free (semWakes): the grant's notice, made a
	// hint to try.
	hintGranted = "granted"
)

// grantNotice is what a grant's notice says of the lease it granted.
type grantNotice struct {
	fence     int64
	ttl       time.Duration // the lease's TTL from its grant
	available int64         // a semaphore's permits left free; -1 for a lock's notice
}

// parseAcquired reads a grant's notice, as acquire.lua and rw_acquire.lua
// publish it, "acquired:<fence>:<ttl_ms>", and sem_acquire.lua,
// "acquired:<fence>:<ttl_ms>:<available>". It reports false for any other
// message, a hint.
func parseAcquired(msg string) (grantNotice, bool) {
	rest, ok := strings.CutPrefix(msg, hintAcquired+":")
	if !ok {
		return grantNotice{}, false
	}
	fields := strings.Split(rest, ":")
	if len(fields) < 2 || len(fields) > 3 {
		return grantNotice{}, false
	}
	v := [3]int64{2: -1}
	for i, f := range fields {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return grantNotice{}, false
		}
		v[i] = n
	}
	return grantNotice{fence: v[0], ttl: time.Duration(v[1]) * time.Millisecond, available: v[2]}, true
}

// isNotice reports whether msg is a grant's notice rather than a hint.
func isNotice(msg string) bool {
	_, ok := parseAcquired(msg)
	return ok
}

// offer puts msg in c (buffered 1), or in place of the message c holds
// when msg replaces it (see replaces), and reports whether it did. Called
// with the lock that every sender to c holds.
func offer(c chan string, msg string) bool {
	select {
	case c <- msg:
		return true
	default:
	}
	taken := true
	select {
	case old := <-c:
		if !replaces(msg, old) {
			msg, taken = old, false // it stays
		}
	default: // received meanwhile
	}
	select {
	case c <- msg:
	default:
	}
	return taken
}

// replaces reports whether msg takes the place of old, pending for a
// listener: a hint replaces a notice, so a notice never costs a waiter its
// wake-up (the attempt's reply then says when to look again); a notice
// replaces a notice of a longer lease, so the waiter looks again when the
// first of them may end; nothing replaces a pending hint.
func replaces(msg, old string) bool {
	o, oldNotice := parseAcquired(old)
	if !oldNotice {
		return false
	}
	n, notice := parseAcquired(msg)
	return !notice || n.ttl < o.ttl
}

// subscriber is the process's pub/sub connection: one on a single node, one
// per primary on a Redis Cluster, where channels are subscribed with
// SSUBSCRIBE on the primary of their slot (subscriber_cluster.go). Listeners
// join the channel of the lock they care about; a channel is subscribed
// while at least one listener is on it and unsubscribed when the last one
// leaves. Messages are hints: listeners always re-check the lock in Redis.
//
// Joining and leaving are bookkeeping only: they never wait for Redis. The
// SUBSCRIBE and UNSUBSCRIBE commands that follow from them are sent by one
// goroutine of the subscriber (sync), outside its lock, in the order the
// bookkeeping changed, so a stalled Redis delays subscriptions but never a
// waiter, nor the join or leave of a waiter of another lock.
type subscriber struct {
	rdb       store.Client
	sharded   bool          // SSUBSCRIBE on each channel's primary (Redis Cluster)
	router    clusterRouter // the cluster client, when sharded and it routes keys
	opTimeout time.Duration
	ping      time.Duration
	metrics   *metrics

	mu       sync.Mutex
	conns    map[string]*subConn // by group: "" on a single node, a primary's address on a cluster
	synced   chan struct{}       // closed when the sync loop ends; nil until the first join
	kick     chan struct{}       // buffered 1: dirty holds channels to sync
	closed   bool
	channels map[string]*subChannel // channels with listeners
	// sent holds the channels SUBSCRIBE was sent for and not UNSUBSCRIBE
	// (what go-redis re-subscribes after a reconnect), true once Redis
	// confirmed the subscription. Only the sync loop adds entries; the sync
	// loop and a slot move (moved) remove them.
	sent  map[string]bool
	where map[string]string   // channel -> group its SUBSCRIBE was sent on
	stale map[string]string   // channel -> group to unsubscribe it from (its slot moved)
	dirty map[string]struct{} // channels whose listeners came or went since the last sync
	// unconfirmed are the channels sent and not confirmed at the last tick
	// of the sync loop (cluster only): sent again when still so.
	unconfirmed map[string]bool
}

// subConn is one pub/sub connection and its dispatch loop.
type subConn struct {
	ps   *redis.PubSub
	done chan struct{} // closed when the dispatch loop ends
}

// subChannel is one channel's listeners in arrival order. It lives while
// the channel has listeners.
type subChannel struct {
	listeners []*listener
	ready     chan struct{} // closed once Redis confirmed the subscription
}

// listener receives the hints of one channel. A broadcast listener (a fair
// waiter, a hold stream) gets every hint; the others share each hint: it
// wakes the longest-waiting one only, so a release does not stampede every
// waiter of the process onto Redis.
type listener struct {
	sub       *subscriber
	channel   string
	broadcast bool
	ignore    string        // a hint this listener has no use for ("" for none): never delivered to it
	c         chan string   // buffered 1; a full buffer already holds a pending hint or notice (see offer)
	ready     chan struct{} // the channel's: closed once the subscription is confirmed
}

// newSubscriber returns the subscriber of rdb; sharded selects Redis 7's
// sharded pub/sub, one connection per primary (a cluster).
func newSubscriber(rdb store.Client, sharded bool, opTimeout, ping time.Duration, m *metrics) *subscriber {
	s := &subscriber{rdb: rdb, sharded: sharded, opTimeout: opTimeout, ping: ping, metrics: m,
		conns: map[string]*subConn{}, channels: map[string]*subChannel{}, sent: map[string]bool{},
		where: map[string]string{}, stale: map[string]string{}, dirty: map[string]struct{}{},
		unconfirmed: map[string]bool{}}
	if r, ok := rdb.(clusterRouter); ok && sharded {
		s.router = r
	}
	return s
}

// errClosed reports a join after Close.
var errClosed = errors.New("locks: closed")

// join adds a listener on channel; the channel is subscribed if it is new.
// It does not wait for Redis: the listener's Ready channel closes once Redis
// confirmed the subscription, and only a release published after that is
// sure to be heard, so a caller that looked at the lock before Ready closed
// looks again when it does. If the subscription cannot be made, it is sent
// again when the connection comes back, and the caller's timed re-checks
// keep it going meanwhile. It fails only after close.
func (s *subscriber) join(channel string, broadcast bool) (*listener, error) {
	return s.joinIgnoring(channel, broadcast, "")
}

// joinIgnoring is join for a listener that is never given the hint ignore:
// a read/write lock's reader, which hintDrained cannot let in.
func (s *subscriber) joinIgnoring(channel string, broadcast bool, ignore string) (*listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	if s.synced == nil {
		s.synced, s.kick = make(chan struct{}), make(chan struct{}, 1)
		go s.sync(s.kick, s.synced)
	}
	ch := s.channels[channel]
	if ch == nil {
		ch = &subChannel{ready: make(chan struct{})}
		if s.sent[channel] {
			// Its last listener left, and the UNSUBSCRIBE was not sent
			// yet: the subscription never stopped.
			close(ch.ready)
		}
		s.channels[channel] = ch
		s.metrics.subscriptions.Inc()
		s.changed(channel)
	}
	l := &listener{sub: s, channel: channel, broadcast: broadcast, ignore: ignore, c: make(chan string, 1), ready: ch.ready}
	ch.listeners = append(ch.listeners, l)
	s.metrics.listeners.Inc()
	return l, nil
}

// changed records that channel gained its first listener or lost its last
// one, for the sync loop. Called with the subscriber's lock held.
func (s *subscriber) changed(channel string) {
	if s.closed || s.kick == nil {
		return
	}
	s.dirty[channel] = struct{}{}
	select {
	case s.kick <- struct{}{}:
	default: // a sync is already due
	}
}

// sync sends the SUBSCRIBE and UNSUBSCRIBE commands that the listeners'
// comings and goings call for, until kick is closed. It is the only sender,
// so the commands of one channel reach Redis in order, and a channel that
// lost its last listener and got a new one before a sync is left as it is.
// Each command is bounded by the Redis timeout; on error go-redis keeps a
// channel it was asked to subscribe (and subscribes it again when it
// reconnects) and forgets one it was asked to unsubscribe. On a cluster it
// also sends again, on its slot's primary as now known, a subscription not
// confirmed for a whole tick (unconfirmedTick).
func (s *subscriber) sync(kick <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	var tick <-chan time.Time
	if s.sharded {
		t := time.NewTicker(unconfirmedTick)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case _, ok := <-kick:
			if !ok {
				return
			}
		case <-tick:
			s.resendUnconfirmed()
		}
		subscribe, unsubscribe := s.pending()
		for group, channels := range unsubscribe {
			if ps := s.conn(group); ps != nil {
				s.send(ps, false, s.batches(channels))
			}
		}
		for group, channels := range s.groups(subscribe) {
			s.sentOn(group, channels)
			batches := s.batches(channels)
			ps := s.conn(group)
			if ps == nil {
				if ps = s.open(group, batches[0]); ps == nil {
					return // closed
				}
				batches = batches[1:]
			}
			s.send(ps, true, batches)
		}
	}
}

// batches cuts channels into the batches one command may name: all of
// them on a single node, one batch per slot with SSUBSCRIBE and
// SUNSUBSCRIBE (a sharded command's channels share a slot).
func (s *subscriber) batches(channels []string) [][]string {
	if !s.sharded {
		return [][]string{channels}
	}
	bySlot := map[int][]string{}
	for _, c := range channels {
		bySlot[store.Slot(c)] = append(bySlot[store.Slot(c)], c)
	}
	return slices.Collect(maps.Values(bySlot))
}

// send subscribes or unsubscribes each batch of channels on ps with one
// command, bounded by the Redis timeout.
func (s *subscriber) send(ps *redis.PubSub, subscribe bool, batches [][]string) {
	for _, b := range batches {
		ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout)
		switch {
		case s.sharded && subscribe:
			_ = ps.SSubscribe(ctx, b...)
		case s.sharded:
			_ = ps.SUnsubscribe(ctx, b...)
		case subscribe:
			_ = ps.Subscribe(ctx, b...)
		default:
			_ = ps.Unsubscribe(ctx, b...)
		}
		cancel()
	}
}

// conn returns the connection of group, nil when it is not open (or the
// subscriber is closed).
func (s *subscriber) conn(group string) *redis.PubSub {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conns[group]; c != nil && !s.closed {
		return c.ps
	}
	return nil
}

// open opens the connection of group subscribed to first, and starts its
// dispatch loop; nil after close. A sharded connection is opened by its
// first SSUBSCRIBE, on the primary of that channel's slot: a go-redis
// PubSub that started receiving before it would be on a random node.
func (s *subscriber) open(group string, first []string) *redis.PubSub {
	ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout)
	defer cancel()
	c := &subConn{done: make(chan struct{})}
	if s.sharded {
		c.ps = s.rdb.SSubscribe(ctx, first...)
	} else {
		c.ps = s.rdb.Subscribe(ctx, first...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.ps.Close()
		return nil
	}
	s.conns[group] = c
	if s.sharded {
		go s.dispatchSharded(group, c)
	} else {
		go s.dispatch(group, c.ps.ChannelWithSubscriptions(
			redis.WithChannelSize(1024), redis.WithChannelHealthCheckInterval(s.ping)), c.done)
	}
	return c.ps
}

// sentOn records the group whose connection channels are subscribed on.
func (s *subscriber) sentOn(group string, channels []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range channels {
		if _, sent := s.sent[c]; sent {
			s.where[c] = group
		}
	}
}

// pending takes the dirty channels and says which to subscribe and which
// to unsubscribe (by the group they were sent on), recording them as sent
// or not; channels whose slot moved are unsubscribed from their old group.
func (s *subscriber) pending() (subscribe []string, unsubscribe map[string][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil
	}
	unsubscribe = map[string][]string{}
	for channel, group := range s.stale {
		unsubscribe[group] = append(unsubscribe[group], channel)
	}
	clear(s.stale)
	for channel := range s.dirty {
		_, sent := s.sent[channel]
		switch want := s.channels[channel] != nil; {
		case want && !sent:
			s.sent[channel] = false
			subscribe = append(subscribe, channel)
		case !want && sent:
			group := s.where[channel]
			delete(s.sent, channel)
			delete(s.where, channel)
			unsubscribe[group] = append(unsubscribe[group], channel)
		}
	}
	clear(s.dirty)
	return subscribe, unsubscribe
}

// C delivers hints.
func (l *listener) C() <-chan string { return l.c }

// Ready is closed once Redis confirmed the subscription of the listener's
// channel.
func (l *listener) Ready() <-chan struct{} { return l.ready }

// leave removes the listener. A waiter that leaves without the lock passes
// on a wake-up (handOn), in case it had been woken for a release it did not
// use. The channel is unsubscribed when its last listener leaves.
func (l *listener) leave(handOn bool) {
	s := l.sub
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[l.channel]
	if ch == nil {
		return
	}
	i := slices.Index(ch.listeners, l)
	if i < 0 {
		return
	}
	ch.listeners = slices.Delete(ch.listeners, i, i+1)
	s.metrics.listeners.Dec()
	if handOn {
		ch.wakeOne(hintHandedOn)
	}
	if len(ch.listeners) > 0 {
		return
	}
	delete(s.channels, l.channel)
	s.metrics.subscriptions.Dec()
	s.changed(l.channel)
}

// wakeOne gives a hint to the longest-waiting shared listener that has none
// pending (a pending notice gives way, see offer). Called with the
// subscriber's lock held.
func (ch *subChannel) wakeOne(hint string) {
	for _, l := range ch.listeners {
		if !l.broadcast && hint != l.ignore && offer(l.c, hint) {
			return
		}
	}
}

// wakeAll gives a hint, or a notice, to every listener that has none
// pending (see offer). Called with the subscriber's lock held.
func (ch *subChannel) wakeAll(msg string) {
	for _, l := range ch.listeners {
		offer(l.c, msg)
	}
}

// dispatch hands messages and subscription confirmations of the connection
// of group to listeners until it is closed.
func (s *subscriber) dispatch(group string, in <-chan any, done chan<- struct{}) {
	defer close(done)
	for msg := range in {
		s.handle(group, msg)
	}
}

// handle hands one message or subscription confirmation of the connection
// of group to listeners.
func (s *subscriber) handle(group string, msg any) {
	switch m := msg.(type) {
	case *redis.Subscription:
		switch m.Kind {
		case "subscribe", "ssubscribe":
			s.confirmed(m.Channel)
		case "sunsubscribe":
			s.moved(group, m.Channel)
		}
	case *redis.Message:
		s.deliver(m.Channel, m.Payload)
	}
}

// confirmed records Redis's confirmation of a SUBSCRIBE. The first one of a
// subscription makes its channel ready (it may come from go-redis
// subscribing again on a new connection, when the first SUBSCRIBE could not
// be sent). A later one comes from go-redis re-subscribing after a
// reconnect: messages may have been missed meanwhile, so every listener is
// told to re-check. A confirmation for a channel unsubscribed since is
// dropped.
func (s *subscriber) confirmed(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	confirmed, sent := s.sent[channel]
	if !sent {
		return
	}
	ch := s.channels[channel]
	if !confirmed {
		s.sent[channel] = true
		if ch != nil && !isClosed(ch.ready) {
			close(ch.ready)
			return
		}
		if ch == nil {
			return
		}
		// Subscribed again after its slot moved: messages may have been
		// missed meanwhile.
	}
	if ch != nil {
		s.metrics.resubscribes.Inc()
		ch.wakeAll(hintResubscribed)
	}
}

// deliver hands one message to the listeners of its channel: a hint to every
// broadcast listener and one shared listener, a grant's notice to every
// listener (it sends none of them to Redis, see acquireWaiting).
func (s *subscriber) deliver(channel, payload string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channel]
	if ch == nil {
		return
	}
	if isNotice(payload) {
		ch.wakeAll(payload)
		return
	}
	for _, l := range ch.listeners {
		if l.broadcast && payload != l.ignore {
			offer(l.c, payload)
		}
	}
	ch.wakeOne(payload)
}

// close closes the pub/sub connection and waits for the dispatch and sync
// loops to end.
func (s *subscriber) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	conns, synced := slices.Collect(maps.Values(s.conns)), s.synced
	if s.kick != nil {
		close(s.kick)
	}
	s.mu.Unlock()
	var errs []error
	for _, c := range conns {
		errs = append(errs, c.ps.Close())
		<-c.done
	}
	if synced != nil {
		<-synced
	}
	return errors.Join(errs...)
}

// count reports the channels subscribed and the listeners on them.
func (s *subscriber) count() (channels, listeners int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.channels {
		listeners += len(ch.listeners)
	}
	return len(s.channels), listeners
}
