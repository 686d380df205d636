package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Kind is a primitive that can be watched (see Client.Watch).
type Kind string

// The primitives a watch follows, as their routes name them.
const (
	KindLock      Kind = "locks"
	KindRWLock    Kind = "rwlocks"
	KindSemaphore Kind = "semaphores"
	KindElection  Kind = "elections"
)

// The types of watch events.
const (
	// EventState carries the name's whole public state (Event.State,
	// the JSON of its GET): first, and after a change not told as events.
	EventState = "state"
	// EventAcquired: a lease with a new fence is held.
	EventAcquired = "acquired"
	// EventReleased: a lease was released before its TTL ran out.
	EventReleased = "released"
	// EventExpired: a lease reached its TTL without a release.
	EventExpired = "expired"
	// EventLost: a keep-alive lease was lost; Event.Reason says why.
	EventLost = "lost"
	// EventForceReleased: an administrator force-released a lease.
	EventForceReleased = "force-released"
	// EventElected: an election has a leader of a new term (Event.Fence),
	// with Event.Value.
	EventElected = "elected"
	// EventProclaimed: an election's leader set a new value, Event.Value,
	// in the same term.
	EventProclaimed = "proclaimed"
	// EventVacant: an election's leader of term Event.Fence is gone;
	// Event.Reason says why, unless it resigned.
	EventVacant = "vacant"
)

// Event is one event of a watch: a change of a name, or its whole state.
// The last event of a watch that cannot go on has Err set (the server
// refused it: a bad name, a key without the locks:read scope, too many
// streams of this client).
type Event struct {
	Type string // one of the Event* types
	// ID identifies the name's state after the event; a reconnect sends
	// the last one, and the server sends the state again only when it
	// changed since.
	ID     string
	Name   string
	Fence  int64  // the lease the event is about (an election's: the term)
	Reason string // EventLost, EventVacant: why
	Owner  string
	Value  string // an election's leader: its value
	// Since is when an election's leader's term began (the server's store
	// clock); zero for other events.
	Since time.Time
	Mode  string        // a read/write lock's lease
	Count int64         // a semaphore's lease: its permits
	TTL   time.Duration // the lease's TTL when last read
	// ExpiresAt is when the lease ends or ended, as last read (the
	// server's store clock); zero when not told.
	ExpiresAt time.Time
	// State is the JSON of the name's state (EventState): the body of its
	// GET, to unmarshal as the caller needs.
	State json.RawMessage
	Err   error
}

// watchEventJSON is the data of a watch stream's lease events.
type watchEventJSON struct {
	Name   string `json:"name"`
	Fence  int64  `json:"fence"`
	Reason string `json:"reason"`
	Owner  string `json:"owner"`
	Mode   string `json:"mode"`
	Count  int64  `json:"count"`
	TTLMS  int64  `json:"ttl_ms"`
	Value  string `json:"value"`
	// Since and ExpiresAt are pointers: absent, they are not the zero
	// time's text.
	Since     *time.Time `json:"since"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// Watch follows name of kind without holding it: the events of
// GET /v1/{kind}/{name}/events, in order, until ctx ends, when the channel
// is closed. When the stream breaks (a server restart, a network fault, a
// 503) it reconnects with the last event's id after a pause of the retry
// policy's backoff, so no change is missed: the server answers a gap with
// a fresh EventState. A refusal (any other error answer) is sent as a last
// Event with Err, and the channel is closed.
func (c *Client) Watch(ctx context.Context, kind Kind, name string) <-chan Event {
	out := make(chan Event, 16)
	go c.watch(ctx, kind, name, out)
	return out
}

// watch runs one Watch.
func (c *Client) watch(ctx context.Context, kind Kind, name string, out chan<- Event) {
	defer close(out)
	lastID := ""
	emit := func(ev Event) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for failures := 0; ; {
		req := request{method: http.MethodGet, path: "/v1/" + string(kind) + "/" + url.PathEscape(name) + "/events",
			lastEventID: lastID}
		resp, err := c.sendMaybeStream(ctx, req, true)
		if err == nil && resp.status != http.StatusOK {
			err = errorOf(req, resp)
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return
			case !errors.Is(err, ErrUnavailable) && resp.status != http.StatusServiceUnavailable:
				emit(Event{Name: name, Err: fmt.Errorf("watch %s: %w", name, err)})
				return
			}
			failures++
			if c.pause(ctx, min(failures, 20), resp) != nil {
				return
			}
			continue
		}
		failures = 0
		br := bufio.NewReader(resp.stream)
		for {
			sev, err := readEvent(br)
			if err != nil {
				break
			}
			ev, ok := toEvent(name, sev)
			if !ok {
				continue
			}
			if ev.ID != "" {
				lastID = ev.ID
			}
			if !emit(ev) {
				_ = resp.stream.Close()
				return
			}
		}
		_ = resp.stream.Close()
		if ctx.Err() != nil {
			return
		}
	}
}

// toEvent reads one event of a watch stream; an event it does not know, or
// whose data it cannot read, is skipped (a newer server's).
func toEvent(name string, sev sseEvent) (Event, bool) {
	ev := Event{Type: sev.name, ID: sev.id, Name: name}
	if sev.name == EventState {
		ev.State = json.RawMessage(sev.data)
		return ev, json.Valid(ev.State)
	}
	var d watchEventJSON
	if err := json.Unmarshal([]byte(sev.data), &d); err != nil {
		return Event{}, false
	}
	ev.Fence, ev.Reason, ev.Owner, ev.Mode, ev.Count, ev.Value = d.Fence, d.Reason, d.Owner, d.Mode, d.Count, d.Value
	if d.Since != nil {
		ev.Since = *d.Since
	}
	if d.ExpiresAt != nil {
		ev.ExpiresAt = *d.ExpiresAt
	}
	ev.TTL = time.Duration(d.TTLMS) * time.Millisecond
	return ev, true
}
