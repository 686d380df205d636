package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// HoldOptions tunes a hold. Zero values take the server's defaults.
type HoldOptions struct {
	// TTL is the lease's time to live (server default 30s); the server
	// renews it every TTL/3 while the connection stays open.
	TTL time.Duration
	// Wait bounds how long Hold waits for a held lock; zero waits until ctx
	// is done, a negative Wait does not wait.
	Wait time.Duration
	// Fair queues this waiter in arrival order among fair waiters.
	Fair bool
	// Owner describes the holder, as LockOptions.Owner.
	Owner string
}

// Hold acquires the lock name as a connection-scoped lease: the server
// holds it for as long as the connection that asked for it stays open,
// renewing it every TTL/3, and reports on that connection (Server-Sent
// Events) when it renews, loses or releases the lease. Done is closed when
// the server reports the lease lost or released, when the connection breaks
// (the server releases the lease then), or when ValidUntil passes without a
// renewal reported. Unlock releases the lease and closes the connection.
//
// ValidUntil starts as the send time of the hold request plus the TTL, or,
// when later (the hold waited), as a renewal event would set it from the
// acquired event's arrival: the server announces a lease with at least two
// thirds of its TTL left. A renewal reported on the stream moves it to the event's arrival plus
// two thirds of the TTL: the server renews every TTL/3 and does not say
// when it renewed, so an event is taken to be as old as one renewal
// interval. ValidUntil is thus never later than the lease's expiry in Redis
// as long as every event reaches the client within TTL/3 of
// the renewal it reports; an event delayed longer (a buffering proxy, a
// paused process) stands for a missed renewal, and ValidUntil may then be
// late by the excess of that delay.
//
// An acquire whose outcome is unknown is settled as Lock settles it: when
// the request sent again with the same token is granted as a re-entry, the
// holds of the earlier attempts are given back before Hold returns, so the
// end of the stream (whose close releases one hold) frees the lock.
//
// ctx bounds the acquisition only; the hold lasts until Unlock or until it
// is lost. Returns the errors of Lock.
func (c *Client) Hold(ctx context.Context, name string, opts HoldOptions) (*Lease, error) {
	return c.hold(ctx, lockTarget(name), opts)
}

// hold takes a lease of t as a connection-scoped lease; see Hold.
func (c *Client) hold(ctx context.Context, t target, opts HoldOptions) (*Lease, error) {
	name := t.name
	token := NewToken()
	streamCtx, stopStream := context.WithCancel(context.WithoutCancel(ctx))
	// Until the lease is granted, the caller's ctx bounds the request too.
	unbind := context.AfterFunc(ctx, stopStream)
	send := func(_ context.Context, req request) (response, error) {
		return c.sendMaybeStream(streamCtx, req, true)
	}
	lo := LockOptions{TTL: opts.TTL, Wait: opts.Wait, Fair: opts.Fair, Owner: opts.Owner}
	req := request{method: http.MethodPost, path: t.path() + "/hold", token: token}
	resp, err := c.acquire(ctx, t, req, lo, send)
	if err != nil {
		stopStream()
		return nil, err
	}
	fail := func(err error) (*Lease, error) {
		stopStream()
		_ = resp.stream.Close()
		_ = c.settle(ctx, t, token)
		return nil, fmt.Errorf("hold %s: %w", name, err)
	}
	br := bufio.NewReader(resp.stream)
	ev, err := readEvent(br)
	received := time.Now()
	if err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return fail(fmt.Errorf("%w: the stream ended before the lease was granted: %w", ErrUnavailable, err))
	}
	var lj leaseJSON
	if ev.name != "acquired" {
		return fail(fmt.Errorf("first event is %q, want acquired", ev.name))
	}
	if err := json.Unmarshal([]byte(ev.data), &lj); err != nil {
		return fail(fmt.Errorf("acquired event: %w", err))
	}
	if lj.Reentrant {
		// An earlier attempt was granted too (its answer was lost): its
		// hold would outlive this stream, whose end releases only one.
		if err := c.giveBackExtra(ctx, t, token, lj.HoldCount); err != nil {
			return fail(err)
		}
	}
	if !unbind() { // ctx ended meanwhile: the caller no longer wants it
		return fail(context.Cause(ctx))
	}
	// The server announces a lease with at least two thirds of its TTL
	// left (it renews one a third gone first), so the acquired event counts
	// as a renewal does: a hold granted after waiting longer than its TTL
	// is valid from the event, not only from the request's send time.
	ttl := time.Duration(lj.TTLMS) * time.Millisecond
	from := resp.sent
	if r := renewedUntil(received, ttl).Add(-ttl); r.After(from) {
		from = r
	}
	l := c.newLease(t, token, lj.Fence, from, ttl)
	l.mu.Lock()
	l.stop = stopStream
	l.mu.Unlock()
	l.bg.Add(1)
	go l.readStream(br, resp.stream)
	return l, nil
}

// renewInterval is how often the server renews a hold or a keep-alive lease
// whose TTL is ttl: every ttl/3.
func renewInterval(ttl time.Duration) time.Duration { return max(ttl/3, time.Millisecond) }

// renewedUntil is the validity a "renewed" event of a hold whose TTL is ttl
// gives when it arrives at received. When the server renewed is not known
// here, only that it was before received: an event that was delayed on its
// way (a proxy's buffer, a paused process) renewed a lease that ends
// earlier than received+ttl. So the validity is counted as if the event were
// one renewal interval old: received + ttl - renewInterval(ttl). It is never
// later than the lease's expiry in Redis as long as each event arrives
// within renewInterval(ttl) of the renewal it reports; an event older than
// that is a renewal missed, and ValidUntil may then be late by the excess.
func renewedUntil(received time.Time, ttl time.Duration) time.Time {
	return received.Add(ttl - renewInterval(ttl))
}

// sseEvent is one Server-Sent Event.
type sseEvent struct{ id, name, data string }

// readEvent reads the next event from r, skipping comments (the server's
// pings).
func readEvent(r *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	var data []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return ev, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if ev.name != "" || len(data) > 0 {
				ev.data = strings.Join(data, "\n")
				return ev, nil
			}
		case strings.HasPrefix(line, ":"): // a comment: a ping
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				ev.id = value
			case "event":
				ev.name = value
			case "data":
				data = append(data, value)
			}
		}
	}
}

// readStream follows a hold's events until the lease ends.
func (l *Lease) readStream(r *bufio.Reader, body io.ReadCloser) {
	defer l.bg.Done()
	defer body.Close()
	for {
		ev, err := readEvent(r)
		if err != nil {
			l.mu.Lock()
			unlocked := l.unlocked
			l.mu.Unlock()
			if !unlocked { // Unlock ends the lease itself
				l.lost(ReasonConnectionLost, err)
			}
			return
		}
		switch ev.name {
		case "renewed":
			var lj leaseJSON
			if json.Unmarshal([]byte(ev.data), &lj) == nil {
				l.extend(renewedUntil(time.Now(), time.Duration(lj.TTLMS)*time.Millisecond))
			}
		case "lost":
			var lost struct {
				Reason string `json:"reason"`
			}
			_ = json.Unmarshal([]byte(ev.data), &lost)
			if lost.Reason == "" {
				lost.Reason = ReasonExpired
			}
			l.lost(lost.Reason, nil)
			return
		case "released":
			l.finish(ErrReleased)
			return
		}
	}
}
