package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// allowWait lets a request wait up to wait before it answers: the server's
// read timeout must not cancel it (its body is read already) and its write
// timeout must not cut the answer. Writers that cannot move deadlines (tests'
// recorders) are left alone.
func (a *api) allowWait(w http.ResponseWriter, wait time.Duration) {
	if wait <= 0 {
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Now().Add(wait + a.cfg.StreamWriteTimeout))
}

// waitContext is the context of a request that may wait up to wait: r's,
// and when it waits, also cancelled when the server begins to shut down
// (untilStopping), with the write deadline moved past the wait
// (allowWait). Call cancel when the request is answered.
func (a *api) waitContext(w http.ResponseWriter, r *http.Request, wait time.Duration) (ctx context.Context, cancel context.CancelFunc) {
	if wait <= 0 {
		return r.Context(), func() {}
	}
	a.allowWait(w, wait)
	return a.untilStopping(r)
}

// errStopping is the cause of a wait or hold cut short by a shutdown.
var errStopping = errors.New("the server is shutting down")

// untilStopping returns r's context, also cancelled (with cause
// errStopping) when the server begins to shut down.
func (a *api) untilStopping(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(r.Context())
	if a.cfg.Stopping != nil {
		go func() {
			select {
			case <-a.cfg.Stopping:
				cancel(errStopping)
			case <-ctx.Done():
			}
		}()
	}
	return ctx, func() { cancel(nil) }
}

// waitError is the error to answer for err, returned by a call that may
// have waited under ctx (see untilStopping): an *interruptedError when a
// shutdown cut the wait short, so the client gets a 503 rather than an
// empty answer that could pass for a grant; else err itself.
func waitError(ctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) && errors.Is(context.Cause(ctx), errStopping) {
		return &interruptedError{err: err}
	}
	return err
}
