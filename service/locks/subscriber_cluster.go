package locks

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// On Redis Cluster the subscriber keeps one sharded pub/sub connection
// (SSUBSCRIBE) per primary: a go-redis PubSub connects to the primary of
// its first channel's slot, and Redis refuses a sharded subscription on a
// node that does not serve the channel's slot. The sync loop groups the
// channels it subscribes by the primary that serves their slot, as the
// cluster client knows it.
//
// A failover is not left to go-redis: a PubSub that reconnects sends one
// SSUBSCRIBE naming every channel it had, which Redis refuses (CROSSSLOT)
// as soon as they span two slots, and it reconnects to the primary of one
// channel's slot as its possibly stale view names it; the connection then
// lives on with no subscription, and every wake-up of its channels is lost.
// So each connection has a receive loop of its own (dispatchSharded): when
// its connection breaks (an error, or a ping unanswered for one ping
// interval: a primary stopped), the subscriber closes it, asks the cluster
// client to reload its view of the slots, and subscribes every channel that
// was on it again, each on its slot's primary as now known, one slot per
// SSUBSCRIBE (lost); their confirmations wake every listener to re-check
// (confirmed), as wake-ups may have been missed. Connections to the other
// primaries are left alone. A slot move (resharding) makes the old primary end the subscriptions of the
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

// lostPause is how long a sharded connection that broke waits before its
// channels are subscribed again: a primary that is down refuses at once,
// and the view of the slots names it until the failover is over, so
// without a pause the subscriber would spin on it.
const lostPause = 100 * time.Millisecond

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

// dispatchSharded hands the messages and subscription confirmations of the
// sharded connection c of group to listeners until c is closed or broken.
// It pings the connection after each ping interval without a message; an
// error other than a reply of Redis (such as a refused SSUBSCRIBE, sent
// again by resendUnconfirmed), or a ping unanswered by the next interval,
// means the connection broke: lost subscribes its channels again.
func (s *subscriber) dispatchSharded(group string, c *subConn) {
	defer close(c.done)
	ctx := context.Background()
	pinged := false
	for {
		msg, err := c.ps.ReceiveTimeout(ctx, s.ping)
		switch {
		case err == nil:
			pinged = false
			s.handle(group, msg)
			continue
		case errors.Is(err, redis.ErrClosed):
			return
		case store.IsServerError(err):
			continue
		case isTimeout(err) && !pinged:
			pinged = true
			pctx, cancel := context.WithTimeout(ctx, s.opTimeout)
			err = c.ps.Ping(pctx)
			cancel()
			if err == nil {
				continue
			}
		}
		time.Sleep(lostPause)
		s.lost(group, c)
		return
	}
}

// isTimeout reports a read that timed out: nothing came on the connection.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// lost drops the broken sharded connection c of group: every channel that
// was sent on it is subscribed again by the sync loop, on its slot's
// primary after the cluster client reloaded its view of the slots, and is
// confirmed anew (which wakes its listeners to re-check).
func (s *subscriber) lost(group string, c *subConn) {
	s.mu.Lock()
	if s.closed || s.conns[group] != c {
		s.mu.Unlock()
		return
	}
	delete(s.conns, group)
	for channel, g := range s.where {
		if g != group {
			continue
		}
		delete(s.sent, channel)
		delete(s.where, channel)
		delete(s.unconfirmed, channel)
		if s.channels[channel] != nil {
			s.changed(channel)
		}
	}
	for channel, g := range s.stale {
		if g == group {
			delete(s.stale, channel) // nothing left to unsubscribe there
		}
	}
	if s.router != nil {
		s.router.ReloadState(context.Background())
	}
	s.mu.Unlock()
	_ = c.ps.Close()
}
