package locks

import (
	"slices"
	"strconv"
	"strings"
	"sync"
)

// semWakes shares out a semaphore's wake-ups among the waiters of this
// process. A message that says how many permits are free ("released:2"
// after a release, "granted:1" after a grant that left some) wakes, in
// arrival order, the waiters whose counts fit in that many (as Redisson's
// semaphore wakes as many waiters as permits were released); expired leases
// publish nothing, which the waiters' timed re-checks cover, and
// any other hint (a force-release, a change of permits, a waiter that left,
// a re-subscription) wakes them all, and so does every hint in fair mode:
// only the queue's head may take permits, and this process cannot tell which
// of its waiters that is. So a release does not send every waiter
// of the process to Redis, while a waiter that fits is never passed over
// for one that does not. Each semaphore with waiters here has one broadcast
// listener on the shared subscriber.
type semWakes struct {
	sub    *subscriber
	mu     sync.Mutex
	groups map[string]*semGroup // by channel
}

// semGroup is the waiters of one semaphore in this process, in arrival order.
type semGroup struct {
	l       *listener
	done    chan struct{} // closed when the last waiter left
	waiters []*semWaiter
}

// semWaiter is one waiter: c (buffered 1) receives its wake-ups.
type semWaiter struct {
	count int64
	fair  bool
	c     chan struct{}
	ready <-chan struct{}
}

// join registers a waiter for count permits on channel. Returns the
// subscriber's error when it is closed.
func (w *semWakes) join(channel string, count int64, fair bool) (*semWaiter, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.groups[channel]
	if g == nil {
		l, err := w.sub.join(channel, true)
		if err != nil {
			return nil, err
		}
		g = &semGroup{l: l, done: make(chan struct{})}
		if w.groups == nil {
			w.groups = map[string]*semGroup{}
		}
		w.groups[channel] = g
		go w.dispatch(g)
	}
	sw := &semWaiter{count: count, fair: fair, c: make(chan struct{}, 1), ready: g.l.Ready()}
	g.waiters = append(g.waiters, sw)
	return sw, nil
}

// leave removes a waiter; the last one of a semaphore leaves the subscriber.
func (w *semWakes) leave(channel string, sw *semWaiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.groups[channel]
	if g == nil {
		return
	}
	g.waiters = slices.DeleteFunc(g.waiters, func(x *semWaiter) bool { return x == sw })
	if len(g.waiters) == 0 {
		delete(w.groups, channel)
		g.l.leave(false)
		close(g.done)
	}
}

// dispatch shares out the hints of g's listener until g is left.
func (w *semWakes) dispatch(g *semGroup) {
	for {
		var hint string
		select {
		case <-g.done:
			return
		case hint = <-g.l.C():
		}
		budget, counted := permitsIn(hint)
		w.mu.Lock()
		for _, sw := range g.waiters {
			switch {
			case sw.fair: // only the queue's head may take them, wherever it waits
			case counted && sw.count > budget:
				continue
			default:
				budget -= sw.count
			}
			select {
			case sw.c <- struct{}{}:
			default:
			}
		}
		w.mu.Unlock()
	}
}

// permitsIn reads the permits a "released:n" or "granted:n" hint frees.
func permitsIn(hint string) (int64, bool) {
	_, n, ok := strings.Cut(hint, ":")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(n, 10, 64)
	return v, err == nil
}
