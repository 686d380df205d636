package locks

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// On Redis Cluster the subscriber keeps one sharded pub/sub connection
// (SSUBSCRIBE) per primary: a go-redis PubSub connects to the primary of
// its first channel's slot, and Redis refuses a sharded subscription on a
// node that does not serve the channel's slot. The sync loop groups the
// channels it subscribes by the primary that serves their slot, as the
// cluster client knows it.
//
// A failover is handled by go-redis: the connection breaks, and the PubSub
// connects to the slot's new primary and subscribes its channels again,
// whose confirmations wake every listener to re-check (confirmed). A slot
// move (resharding) makes the old primary end the subscriptions of the
// slot's channels with an unsolicited SUNSUBSCRIBE: the channel is
// subscribed again on its new primary and its listeners re-check (moved).
// A subscription that stays unconfirmed for a whole tick of the sync loop
// (a SSUBSCRIBE refused with MOVED, on a stale view of the slots) is sent
// again after the client reloaded its view. Meanwhile every waiter keeps its
// timed re-checks.

// unconfirmedTick is how often the sync loop looks for sharded
// subscriptions that Redis has not confirmed: one unconfirmed at two ticks
// in a row is sent again. The cluster client's view of the slots is
// reloaded in the background after a move, so the first SSUBSCRIBE after it
// may go to the old primary and be refused.
const unconfirmedTick = time.Second

// clusterRouter is the part of the cluster client that names a slot's
// primary.
type clusterRouter interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	ReloadState(ctx context.Context)
}

// groups groups channels by the connection they are subscribed on: the
// address of their slot's primary on a cluster ("" when the client cannot
// tell, or on a single node, which has one connection).
func (s *subscriber) groups(channels []string) map[string][]string {
	out := map[string][]string{}
	for _, c := range channels {
		group := ""
		if s.router != nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout)
			if node, err := s.router.MasterForKey(ctx, c); err == nil {
				group = node.Options().Addr
			}
			cancel()
		}
		out[group] = append(out[group], c)
	}
	return out
}

// moved handles a SUNSUBSCRIBE of channel on the connection of group. When
// the channel is still wanted and was confirmed there, Redis ended the
// subscription because the channel's slot moved to another primary: it is
// subscribed again on its new primary, and its listeners re-check, as
// messages may have been missed. The confirmation of an UNSUBSCRIBE this
// subscriber sent finds the channel no longer sent, or sent again, and is
// dropped.
func (s *subscriber) moved(group, channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if confirmed := s.sent[channel]; !confirmed || s.where[channel] != group || s.closed {
		return
	}
	delete(s.sent, channel)
	delete(s.where, channel)
	s.stale[channel] = group
	if s.router != nil {
		s.router.ReloadState(context.Background())
	}
	if ch := s.channels[channel]; ch != nil {
		s.metrics.resubscribes.Inc()
		ch.wakeAll(hintResubscribed)
	}
	s.changed(channel)
}

// resendUnconfirmed sends again, through the sync loop, the subscriptions
// still unconfirmed since the last tick, after asking the cluster client to
// reload its view of the slots.
func (s *subscriber) resendUnconfirmed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	resend := false
	for channel, confirmed := range s.sent {
		switch {
		case confirmed:
			delete(s.unconfirmed, channel)
		case s.unconfirmed[channel]:
			delete(s.unconfirmed, channel)
			if group, ok := s.where[channel]; ok {
				s.stale[channel] = group
			}
			delete(s.sent, channel)
			delete(s.where, channel)
			s.changed(channel)
			resend = true
		default:
			s.unconfirmed[channel] = true
		}
	}
	for channel := range s.unconfirmed {
		if _, sent := s.sent[channel]; !sent {
			delete(s.unconfirmed, channel)
		}
	}
	if resend && s.router != nil {
		s.router.ReloadState(context.Background())
	}
}
