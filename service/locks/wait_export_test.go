package locks

import (
	"context"
	"time"
)

// Listen joins the lock's channel as a hold stream does, without waiting for
// the subscription. Ready is closed once Redis confirmed it; leave ends the
// listening.
func Listen(s *Service, name string) (ready <-chan struct{}, leave func()) {
	l, err := s.sub.join(s.keys(context.Background(), name).channel, true)
	if err != nil {
		panic(err)
	}
	return l.Ready(), func() { l.leave(false) }
}

// QueueHold and QueueRenew: how far ahead a wait's attempt registers its
// waiter, and how often at least a wait attempts (renewing it).
const QueueHold, QueueRenew = queueHold, queueRenew

// Recheck is one re-check time a wait set: due After from then, brought
// forward by a grant's notice (ByNotice) or set after an attempt.
type Recheck struct {
	After    time.Duration
	ByNotice bool
}

// TraceRechecks records the re-check times s's waits set from now on, in
// order, on the channel it returns. Call it before s's first wait; a wait
// blocks when the test has left 1,000 records unread.
func TraceRechecks(s *Service) <-chan Recheck {
	c := make(chan Recheck, 1000)
	s.onRecheck = func(after time.Duration, byNotice bool) { c <- Recheck{after, byNotice} }
	return c
}

// ListenKind is Listen on the name of the primitive tagged kind ("" for the
// exclusive lock).
func ListenKind(s *Service, tag, name string) (ready <-chan struct{}, leave func()) {
	l, err := s.sub.join(s.keysIn(context.Background(), kind(tag), name).channel, true)
	if err != nil {
		panic(err)
	}
	return l.Ready(), func() { l.leave(false) }
}
