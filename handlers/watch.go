package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// watchLeaseEvent is the data of a watch stream's acquired, released,
// expired, lost and force-released events: the lease the event is about,
// never its token.
type watchLeaseEvent struct {
	Name      string     `json:"name"`
	Fence     int64      `json:"fence"`
	Reason    string     `json:"reason,omitempty"` // lost: why
	Owner     string     `json:"owner,omitempty"`
	Mode      string     `json:"mode,omitempty"`  // a read/write lock's lease
	Count     int64      `json:"count,omitempty"` // a semaphore's lease: its permits
	TTLMS     int64      `json:"ttl_ms"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// watchStreams caps the watch streams open on this instance, in all and
// per client (an API key, or a client address on an open API). A client's
// entry lives while it has a stream open.
type watchStreams struct {
	mu        sync.Mutex
	open      int
	perClient map[string]int
}

// takeWatchStream counts a stream of client, or says which cap refuses it.
func (a *api) takeWatchStream(client string) error {
	ws := &a.watches
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.perClient[client] >= a.cfg.WatchMaxPerClient {
		return &httpError{typ: watchClientStreams, detail: fmt.Sprintf(
			"this client has %d watch streams open, the most a client may (-watch-max-streams-per-client): close one first",
			a.cfg.WatchMaxPerClient)}
	}
	if ws.open >= a.cfg.WatchMaxStreams {
		return &httpError{typ: watchInstanceStreams, detail: fmt.Sprintf(
			"this instance has %d watch streams open, the most it serves (-watch-max-streams): retry, another instance may serve it",
			a.cfg.WatchMaxStreams)}
	}
	ws.open++
	ws.perClient[client]++
	return nil
}

// giveBackWatchStream uncounts a stream of client.
func (a *api) giveBackWatchStream(client string) {
	ws := &a.watches
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.open--
	if ws.perClient[client]--; ws.perClient[client] <= 0 {
		delete(ws.perClient, client)
	}
}

// watchClient is who a watch stream is counted against: the API key, or
// the client's address when the API is open.
func (a *api) watchClient(r *http.Request) (string, error) {
	if k := keyOf(r.Context()); k != nil {
		return "key:" + k.ID, nil
	}
	ip, err := a.cfg.RateLimit.ClientIP.ClientKey(r)
	if err != nil {
		return "", err
	}
	return "ip:" + ip, nil
}

// handleWatch implements operationIds watchLock, watchRWLock,
// watchSemaphore and watchElection: a Server-Sent Events stream of the name's public state,
// then one event per change, each with an id (see locks.Watch); a
// Last-Event-ID equal to the current state's id skips the first state.
// Comment lines every WatchPing keep proxies from closing it. Returns the
// errors of locks.Service.Watch and the caps' refusals (watchStreams);
// once the stream has started it returns nil.
func (p *primitive[A, H, R, L]) handleWatch(w http.ResponseWriter, r *http.Request) error {
	a := p.a
	name := lockName(r)
	if err := locks.ValidateName(name); err != nil {
		return err
	}
	lastID, err := singleHeader(r, "Last-Event-ID")
	if err != nil {
		return err
	}
	if len(lastID) > maxEventID {
		return badRequest("Last-Event-ID", "max", fmt.Sprintf("Last-Event-ID must be at most %d characters", maxEventID))
	}
	client, err := a.watchClient(r)
	if err != nil {
		return err
	}
	if err := a.takeWatchStream(client); err != nil {
		return err
	}
	defer a.giveBackWatchStream(client)
	ctx, cancel := a.untilStopping(r)
	defer cancel()
	wt, err := a.svc.Watch(ctx, p.watchKind, name, lastID)
	if err != nil {
		return err
	}
	defer wt.Close()

	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	s := &sseWriter{w: w, rc: rc, timeout: a.cfg.StreamWriteTimeout}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	if err := s.comment("watching"); err != nil {
		return nil
	}
	ping := time.NewTicker(a.cfg.WatchPing)
	defer ping.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return nil
		case <-ping.C:
			err = s.comment("ping")
		case ev, ok := <-wt.Events():
			if !ok { // the service closed, or the client fell behind: it reconnects
				return nil
			}
			err = s.write(string(ev.Encoded(func() []byte { return p.watchFrame(name, ev) })))
		}
		if err != nil { // the client is gone or stuck
			return nil
		}
	}
}

// maxEventID bounds the Last-Event-ID a watch reads: an id is far shorter.
const maxEventID = 128

func toWatchLeaseEvent(name string, ev *locks.WatchEvent) watchLeaseEvent {
	out := watchLeaseEvent{Name: name, Fence: ev.Fence, Reason: ev.Reason}
	if h := ev.Holder; h != nil {
		out.Owner, out.Mode, out.Count, out.TTLMS = h.Owner, string(h.Mode), h.Count, h.TTL.Milliseconds()
		if !h.ExpiresAt.IsZero() {
			out.ExpiresAt = &h.ExpiresAt
		}
	}
	return out
}

// watchFrame is the Server-Sent Event of ev, with its id: written to every
// watch of the name, it is made once (WatchEvent.Encoded).
func (p *primitive[A, H, R, L]) watchFrame(name string, ev *locks.WatchEvent) []byte {
	var data any
	switch {
	case ev.Type == locks.WatchState:
		data = p.watchState(ev.State)
	case p.watchEvent != nil:
		data = p.watchEvent(name, ev)
	default:
		data = toWatchLeaseEvent(name, ev)
	}
	b, _ := json.Marshal(data) // response types of plain fields: never an error
	return []byte("id: " + ev.ID + "\nevent: " + ev.Type + "\ndata: " + string(b) + "\n\n")
}

// watchStates are the first event's bodies of each primitive: the body of
// its GET without a token.
func lockWatchState(st any) any {
	v, _ := st.(locks.LockState)
	return toLockStateResponse(v, false)
}

func rwWatchState(st any) any {
	v, _ := st.(locks.RWState)
	return toRWStateResponse(v, false)
}

func semaphoreWatchState(st any) any {
	v, _ := st.(locks.SemaphoreState)
	return toSemaphoreStateResponse(v, false)
}

func electionWatchState(st any) any {
	v, _ := st.(locks.ElectionState)
	return toElectionStateResponse(v, false)
}

// watchElectionEvent is the data of an election's watch stream's elected,
// proclaimed and vacant events: the leadership the event is about, never
// its token.
type watchElectionEvent struct {
	Name      string     `json:"name"`
	Term      int64      `json:"term"`
	Fence     int64      `json:"fence"`
	Value     string     `json:"value,omitempty"`
	Owner     string     `json:"owner,omitempty"`
	Reason    string     `json:"reason,omitempty"` // vacant: why, unless it resigned
	Since     *time.Time `json:"since,omitempty"`
	TTLMS     int64      `json:"ttl_ms"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func toWatchElectionEvent(name string, ev *locks.WatchEvent) any {
	out := watchElectionEvent{Name: name, Term: ev.Fence, Fence: ev.Fence, Reason: ev.Reason}
	if h := ev.Holder; h != nil {
		out.Value, out.Owner, out.TTLMS = h.Value, h.Owner, h.TTL.Milliseconds()
		if !h.Since.IsZero() {
			out.Since = &h.Since
		}
		if !h.ExpiresAt.IsZero() {
			out.ExpiresAt = &h.ExpiresAt
		}
	}
	return out
}
