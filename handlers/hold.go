package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// lostEvent is the data of a hold stream's "lost" event.
type lostEvent struct {
	Name   string `json:"name"`
	Fence  int64  `json:"fence"`
	Reason string `json:"reason"`
}

// releasedEvent is the data of a hold stream's "released" event.
type releasedEvent struct {
	Name      string `json:"name"`
	Fence     int64  `json:"fence"`
	Released  bool   `json:"released"`
	HoldCount int64  `json:"hold_count"`
}

// streamHold serves a hold stream of any lease primitive (see
// primitive.handleHold): hold takes the lease (waiting up to wait), then
// the service renews it while the connection is open and the stream
// reports "acquired", "renewed", "lost" and "released", with comment lines
// between them so proxies keep the connection open; location names the
// resource; event makes the data of "acquired" (withToken) and "renewed".
// When the client goes away the lease is released at once.
// Returns the errors of hold (an *interruptedError when a shutdown cut its
// wait short); once the stream has started it returns nil.
func (a *api) streamHold(w http.ResponseWriter, r *http.Request, name, location string, wait time.Duration,
	event func(l locks.Lease, withToken bool) any, hold func(context.Context) (*locks.Hold, error)) error {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{}) // the body is read; a hold outlives any read timeout
	_ = rc.SetWriteDeadline(time.Now().Add(wait + a.cfg.StreamWriteTimeout))
	ctx, cancel := a.untilStopping(r)
	defer cancel()
	h, err := hold(ctx)
	if err != nil {
		return waitError(ctx, err)
	}
	lease := h.Lease()
	s := &sseWriter{w: w, rc: rc, timeout: a.cfg.StreamWriteTimeout}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.Header().Set("Lock-Token", lease.Token)
	w.Header().Set("Location", location)
	w.WriteHeader(http.StatusOK)

	// release ends the hold and tells the client, when it is still there
	// (the server is shutting down); after the client went away the write
	// simply fails.
	release := func() {
		rel, err := h.Close(ctx)
		if err != nil {
			a.log.Warn("release of a hold failed; it expires with its TTL", "route", routeOf(r), "err", err)
			return
		}
		_ = s.event("released", releasedEvent{Name: name, Fence: lease.Fence, Released: rel.Released, HoldCount: rel.HoldCount})
	}
	if err := s.event("acquired", event(lease, true)); err != nil {
		release()
		return nil
	}
	ping := time.NewTicker(a.cfg.HoldPing)
	defer ping.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			release()
			return nil
		case <-ping.C:
			err = s.comment("ping")
		case ev, ok := <-h.Events():
			switch {
			case !ok:
				release()
				return nil
			case ev.Kind == locks.HoldRenewed:
				err = s.event("renewed", event(ev.Lease, false))
			case ev.Kind == locks.HoldLost:
				_, _ = h.Close(ctx)
				_ = s.event("lost", lostEvent{Name: name, Fence: lease.Fence, Reason: ev.Reason})
				return nil
			case ev.Kind == locks.HoldReleased:
				_, _ = h.Close(ctx)
				_ = s.event("released", releasedEvent{Name: name, Fence: lease.Fence, Released: true})
				return nil
			}
		}
		if err != nil { // the client is gone or stuck
			release()
			return nil
		}
	}
}

// sseWriter writes Server-Sent Events, each write under its own deadline so
// the server's write timeout never ends a long stream.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (s *sseWriter) event(name string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return s.write(fmt.Sprintf("event: %s\ndata: %s\n\n", name, b))
}

func (s *sseWriter) comment(text string) error { return s.write(": " + text + "\n\n") }

func (s *sseWriter) write(frame string) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if _, err := fmt.Fprint(s.w, frame); err != nil {
		return err
	}
	return s.rc.Flush()
}
