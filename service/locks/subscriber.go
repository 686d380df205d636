package locks

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// Hints a listener may receive. A release publishes hintReleased, a
// force-release hintForced, a departing fair waiter hintLeft, a renew that
// shortened the lease hintShortened; hintResubscribed is delivered after the
// subscriber connection was re-established, because messages published
// while it was down are lost.
const (
	hintReleased     = "released"
	hintForced       = "forced"
	hintLeft         = "left"
	hintShortened    = "shortened"
	hintResubscribed = "resubscribed"
	hintHandedOn     = "handed-on"
)

// subscriber is the process's one pub/sub connection. Listeners join the
// channel of the lock they care about; a channel is subscribed while at least
// one listener is on it and unsubscribed when the last one leaves. Messages
// are hints: listeners always re-check the lock in Redis.
type subscriber struct {
	rdb       store.Client
	opTimeout time.Duration
	ping      time.Duration
	metrics   *metrics

	mu       sync.Mutex
	ps       *redis.PubSub // nil until the first join
	done     chan struct{} // closed when the dispatch loop ends
	closed   bool
	channels map[string]*subChannel
}

// subChannel is one subscribed channel and its listeners in arrival order.
// It is created with the channel's SUBSCRIBE and dropped with its
// UNSUBSCRIBE, so what it knows about the subscription dies with it: a
// SUBSCRIBE that could not be sent (Redis was down) and that go-redis
// forgot at the UNSUBSCRIBE leaves nothing to wait for behind.
type subChannel struct {
	listeners []*listener
	ready     chan struct{} // closed once Redis confirmed the subscription
	confirmed bool
}

// listener receives the hints of one channel. A broadcast listener (a fair
// waiter, a hold stream) gets every hint; the others share each hint: it
// wakes the longest-waiting one only, so a release does not stampede every
// waiter of the process onto Redis.
type listener struct {
	sub       *subscriber
	channel   string
	broadcast bool
	c         chan string // buffered 1; a full buffer already holds a pending hint
}

func newSubscriber(rdb store.Client, opTimeout, ping time.Duration, m *metrics) *subscriber {
	return &subscriber{rdb: rdb, opTimeout: opTimeout, ping: ping, metrics: m,
		channels: map[string]*subChannel{}}
}

// errClosed reports a join after Close.
var errClosed = errors.New("service: closed")

// join adds a listener on channel, subscribing it first if it is new, and
// waits up to confirm for Redis to confirm the subscription, so a release
// after join returns is heard. If the subscription cannot be made or
// confirmed in time, join still returns the listener: the subscription is
// re-sent when the connection comes back, and the caller's timed re-checks
// keep it going meanwhile. It returns ctx's error if ctx ends first.
func (s *subscriber) join(ctx context.Context, channel string, broadcast bool, confirm time.Duration) (*listener, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	if s.ps == nil {
		s.ps = s.rdb.Subscribe(ctx)
		s.done = make(chan struct{})
		go s.dispatch(s.ps.ChannelWithSubscriptions(
			redis.WithChannelSize(1024), redis.WithChannelHealthCheckInterval(s.ping)), s.done)
	}
	ch := s.channels[channel]
	if ch == nil {
		ch = &subChannel{ready: make(chan struct{})}
		s.channels[channel] = ch
		s.metrics.subscriptions.Inc()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opTimeout)
		// On error go-redis keeps the channel and subscribes it again when it
		// reconnects; the confirmation then arrives as usual.
		_ = s.ps.Subscribe(sctx, channel)
		cancel()
	}
	l := &listener{sub: s, channel: channel, broadcast: broadcast, c: make(chan string, 1)}
	ch.listeners = append(ch.listeners, l)
	ready := ch.ready
	s.metrics.listeners.Inc()
	s.mu.Unlock()

	t := time.NewTimer(confirm)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
	case <-ctx.Done():
		l.leave(ctx, false)
		return nil, ctx.Err()
	}
	return l, nil
}

// C delivers hints.
func (l *listener) C() <-chan string { return l.c }

// leave removes the listener. A waiter that leaves without the lock passes
// on a wake-up (handOn), in case it had been woken for a release it did not
// use. The channel is unsubscribed when its last listener leaves.
func (l *listener) leave(ctx context.Context, handOn bool) {
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
	if s.ps != nil && !s.closed {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opTimeout)
		// On error go-redis has still forgotten the channel, so a reconnect
		// does not subscribe it again.
		_ = s.ps.Unsubscribe(uctx, l.channel)
		cancel()
	}
}

// wakeOne gives a hint to the longest-waiting shared listener that has none
// pending. Called with the subscriber's lock held.
func (ch *subChannel) wakeOne(hint string) {
	for _, l := range ch.listeners {
		if l.broadcast {
			continue
		}
		select {
		case l.c <- hint:
			return
		default:
		}
	}
}

// wakeAll gives a hint to every listener that has none pending. Called with
// the subscriber's lock held.
func (ch *subChannel) wakeAll(hint string) {
	for _, l := range ch.listeners {
		select {
		case l.c <- hint:
		default:
		}
	}
}

// dispatch hands messages and subscription confirmations to listeners until
// the pub/sub connection is closed.
func (s *subscriber) dispatch(in <-chan any, done chan<- struct{}) {
	defer close(done)
	for msg := range in {
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				s.confirmed(m.Channel)
			}
		case *redis.Message:
			s.deliver(m.Channel, m.Payload)
		}
	}
}

// confirmed records Redis's confirmation of a SUBSCRIBE. The first one of a
// channel's subscription makes it ready (it may come from go-redis
// subscribing again on a new connection, when the first SUBSCRIBE could not
// be sent). A later one comes from go-redis re-subscribing after a
// reconnect: messages may have been missed meanwhile, so every listener is
// told to re-check. A confirmation for a channel no one listens on any more
// is dropped.
func (s *subscriber) confirmed(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channel]
	switch {
	case ch == nil:
	case !ch.confirmed:
		ch.confirmed = true
		close(ch.ready)
	default:
		s.metrics.resubscribes.Inc()
		ch.wakeAll(hintResubscribed)
	}
}

// deliver hands one message to the listeners of its channel: every broadcast
// listener gets it, and one shared listener.
func (s *subscriber) deliver(channel, payload string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channel]
	if ch == nil {
		return
	}
	for _, l := range ch.listeners {
		if l.broadcast {
			select {
			case l.c <- payload:
			default:
			}
		}
	}
	ch.wakeOne(payload)
}

// close closes the pub/sub connection and waits for the dispatch loop to end.
func (s *subscriber) close() error {
	s.mu.Lock()
	s.closed = true
	ps, done := s.ps, s.done
	s.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	return err
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
