package handlers

// The one path of each operation on a lease (acquire, inspect, renew,
// release and its admin force-release, hold), whatever the primitive: the
// exclusive lock (locks.go), the read/write lock (rwlocks.go), the
// semaphore (semaphores.go) and the election (elections.go) each supply
// only a description of what differs
// (primitive). A hold's stream is hold.go's.

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/latchkey/latchkey/service/locks"
)

// leaseBody is a JSON body that takes a lease: a holdRequest (embedded)
// with the primitive's own fields. R is the service's request it makes.
type leaseBody[R any] interface {
	wait() time.Duration
	serviceRequest(token string) R
}

// primitive describes a lease primitive to the one path of each
// operation: A is its acquire body, H its hold body, R the service's
// request they make and L the lease the service grants and renews.
type primitive[A, H leaseBody[R], R, L any] struct {
	a *api
	// base is the path of the primitive's resources: a resource is
	// base+{name}.
	base string
	// params are the query parameters target reads: which of a token's
	// leases renew and release act on. A release reads force as well.
	params []string
	target func(r *http.Request) (locks.RWMode, error)

	acquire func(ctx context.Context, name string, req R) (L, error)
	hold    func(ctx context.Context, name string, req R) (*locks.Hold, error)
	renew   func(ctx context.Context, name, token string, mode locks.RWMode, ttl time.Duration) (L, error)
	// answer writes a lease: granted (a new or reentrant one, with its
	// token) or renewed.
	answer func(w http.ResponseWriter, l L, granted bool)
	// holdEvent is the data of a hold stream's "acquired" (withToken) and
	// "renewed" events; nil is a lock's lease (toLeaseResponse).
	holdEvent func(l locks.Lease, withToken bool) any
	// release, force and inspect return the body of their answer.
	release func(ctx context.Context, name, token string, mode locks.RWMode) (any, error)
	force   func(ctx context.Context, name string) error
	inspect func(ctx context.Context, name, token string) (any, error)
	// watchKind is the primitive as locks.Service.Watch names it,
	// watchState the body of a watch stream's state event (its GET's), and
	// watchEvent the body of its other events (nil: a lease's,
	// toWatchLeaseEvent).
	watchKind  string
	watchState func(state any) any
	watchEvent func(name string, ev *locks.WatchEvent) any
}

// anyLease is the target of a primitive whose token holds one lease: no
// query parameter names it.
func anyLease(*http.Request) (locks.RWMode, error) { return "", nil }

// modeless is the renew of a primitive whose token holds one lease: it
// takes no mode.
func modeless[L any](renew func(ctx context.Context, name, token string, ttl time.Duration) (L, error)) func(context.Context, string, string, locks.RWMode, time.Duration) (L, error) {
	return func(ctx context.Context, name, token string, _ locks.RWMode, ttl time.Duration) (L, error) {
		return renew(ctx, name, token, ttl)
	}
}

// forced is a force-release that answers only whether it failed.
func forced[T any](force func(ctx context.Context, name string) (T, error)) func(context.Context, string) error {
	return func(ctx context.Context, name string) error {
		_, err := force(ctx, name)
		return err
	}
}

// location is the resource of the lease name.
func (p *primitive[A, H, R, L]) location(name string) string { return p.base + url.PathEscape(name) }

// handleAcquire implements operationIds acquireLock, acquireRWLock,
// acquireSemaphore and campaignElection: it takes the lease the body asks for, waiting when it
// says so, and answers it with its token and location. Returns the errors
// of decoding the request and of the primitive's acquire, or an
// *interruptedError when a shutdown cut its wait short.
func (p *primitive[A, H, R, L]) handleAcquire(w http.ResponseWriter, r *http.Request) error {
	name, body, req, err := readLease[A](p.a, w, r)
	if err != nil {
		return err
	}
	ctx, cancel := p.a.waitContext(w, r, body.wait())
	defer cancel()
	lease, err := p.acquire(ctx, name, req)
	if err != nil {
		return waitError(ctx, err)
	}
	w.Header().Set("Location", p.location(name))
	p.answer(w, lease, true)
	return nil
}

// handleHold implements operationIds holdLock, holdRWLock, holdSemaphore
// and holdElection: a connection-scoped lease streamed as Server-Sent Events
// (see streamHold). The lease is taken (after an optional wait) before the
// stream starts, so failures are ordinary problem answers. Returns the
// errors of decoding the request and of the primitive's hold (an
// *interruptedError when a shutdown cut its wait short); once the stream
// has started it returns nil.
func (p *primitive[A, H, R, L]) handleHold(w http.ResponseWriter, r *http.Request) error {
	name, body, req, err := readLease[H](p.a, w, r)
	if err != nil {
		return err
	}
	event := p.holdEvent
	if event == nil {
		event = func(l locks.Lease, withToken bool) any { return toLeaseResponse(l, withToken) }
	}
	return p.a.streamHold(w, r, name, p.location(name), body.wait(), event,
		func(ctx context.Context) (*locks.Hold, error) { return p.hold(ctx, name, req) })
}

// readLease reads what acquiring and holding a lease share: the name, the
// body B (see decodeLease) and the optional Lock-Token, and req, the
// service's request they make. The name, the token and the body's owner
// are checked by the service. Returns the errors of decodeLease.
func readLease[B leaseBody[R], R any](a *api, w http.ResponseWriter, r *http.Request) (name string, body B, req R, err error) {
	token, err := a.decodeLease(w, r, &body)
	if err != nil {
		return "", body, req, err
	}
	return lockName(r), body, body.serviceRequest(token), nil
}

// handleGet implements operationIds getLock, getRWLock, getSemaphore and
// getElection.
// Returns the errors of reading the optional Lock-Token and of the
// primitive's inspect, which checks the name and the token.
func (p *primitive[A, H, R, L]) handleGet(w http.ResponseWriter, r *http.Request) error {
	token, err := lockToken(r)
	if err != nil {
		return err
	}
	resp, err := p.inspect(r.Context(), lockName(r), token)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// handleRenew implements operationIds renewLock, renewRWLock,
// renewSemaphore and renewElection: it extends the lease the Lock-Token owns (the one the
// target names) by the body's optional ttl (absent: the lease's own).
// Returns the errors of reading the request and of the primitive's renew.
func (p *primitive[A, H, R, L]) handleRenew(w http.ResponseWriter, r *http.Request) error {
	mode, err := p.target(r)
	if err != nil {
		return err
	}
	var body renewRequest
	token, err := p.a.decodeLease(w, r, &body)
	if err != nil {
		return err
	}
	if token == "" {
		return errTokenRequired
	}
	lease, err := p.renew(r.Context(), lockName(r), token, mode, parseDuration(body.TTL))
	if err != nil {
		return err
	}
	p.answer(w, lease, false)
	return nil
}

// handleRelease implements operationIds releaseLock, releaseRWLock,
// releaseSemaphore and resignElection, and with ?force=true the admin force-release of every
// holder. Returns the errors of reading the request, a forbidden error
// without the admin credential, and the errors of the primitive's release
// and force. A force-release checks the credential first: without it the
// answer is 403 whatever the name, as a service that checks access before
// input tells no one without access what it would accept.
func (p *primitive[A, H, R, L]) handleRelease(w http.ResponseWriter, r *http.Request) error {
	mode, err := p.target(r)
	if err != nil {
		return err
	}
	forced, err := forceParam(r)
	if err != nil {
		return err
	}
	if forced {
		if err := p.a.checkAdmin(r); err != nil {
			return err
		}
		if err := p.force(r.Context(), lockName(r)); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	token, err := lockToken(r)
	if err != nil {
		return err
	}
	if token == "" {
		return errTokenRequired
	}
	resp, err := p.release(r.Context(), lockName(r), token, mode)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// holdRequest is the body of POST /v1/locks/{name}/hold; every field is
// optional. It is what every body that takes a lease holds. A duration
// field that is absent or null takes its default; "" is no duration (a
// 400).
type holdRequest struct {
	TTL   *string `json:"ttl" validate:"omitempty,posduration"`
	Wait  *string `json:"wait" validate:"omitempty,duration"`
	Fair  *bool   `json:"fair"`
	Owner string  `json:"owner"` // checked by the service (locks.ValidateOwner)
}

// wait is how long req may wait for the lease.
func (req holdRequest) wait() time.Duration { return parseDuration(req.Wait) }

// serviceRequest is req as the service takes it, under token.
func (req holdRequest) serviceRequest(token string) locks.AcquireRequest {
	return locks.AcquireRequest{
		Token: token,
		TTL:   parseDuration(req.TTL),
		Wait:  req.wait(),
		Fair:  req.Fair != nil && *req.Fair,
		Owner: req.Owner,
	}
}

// acquireRequest is the body of POST /v1/locks/{name}: a hold's body
// and the keep-alive fields; every field is optional. Every primitive's
// acquire body holds it.
type acquireRequest struct {
	holdRequest
	keepaliveFields
}

// keepaliveFields are the keep-alive fields of an acquire's body (a lock's,
// an election's campaign): a hold keeps its lease by its connection instead.
type keepaliveFields struct {
	Keepalive *bool   `json:"keepalive"`
	MaxHold   *string `json:"max_hold" validate:"omitempty,posduration"`
	Heartbeat *string `json:"heartbeat" validate:"omitempty,posduration"`
}

// apply sets f's keep-alive on lr.
func (f keepaliveFields) apply(lr locks.AcquireRequest) locks.AcquireRequest {
	lr.Keepalive = f.Keepalive != nil && *f.Keepalive
	lr.MaxHold = parseDuration(f.MaxHold)
	lr.Heartbeat = parseDuration(f.Heartbeat)
	return lr
}

// serviceRequest is req as the service takes it, under token.
func (req acquireRequest) serviceRequest(token string) locks.AcquireRequest {
	return req.keepaliveFields.apply(req.holdRequest.serviceRequest(token))
}

// renewRequest is the body of a renew: an optional ttl (absent or null:
// the lease's own).
type renewRequest struct {
	TTL *string `json:"ttl" validate:"omitempty,posduration"`
}

// leaseResponse is a granted or renewed lease of a lock or read/write lock.
type leaseResponse struct {
	Name      string             `json:"name"`
	Token     string             `json:"token,omitempty"`
	Fence     int64              `json:"fence"`
	HoldCount int64              `json:"hold_count"`
	TTLMS     int64              `json:"ttl_ms"`
	ExpiresAt time.Time          `json:"expires_at"`
	Reentrant bool               `json:"reentrant"`
	Keepalive *keepaliveResponse `json:"keepalive,omitempty"`
	Mode      string             `json:"mode,omitempty"` // a read/write lock's lease
	WaitedMS  int64              `json:"waited_ms,omitempty"`
}

func toLeaseResponse(l locks.Lease, withToken bool) leaseResponse {
	resp := leaseResponse{Name: l.Name, Fence: l.Fence, HoldCount: l.HoldCount,
		TTLMS: l.TTL.Milliseconds(), ExpiresAt: l.ExpiresAt, Reentrant: l.Reentrant,
		Keepalive: toKeepaliveResponse(l.Keepalive), Mode: string(l.Mode), WaitedMS: l.Waited.Milliseconds()}
	if withToken {
		resp.Token = l.Token
	}
	return resp
}

// answerLease answers a lock's or read/write lock's lease: granted, with
// its Lock-Token (201 new, 200 reentrant), or renewed (200, no token).
func answerLease(w http.ResponseWriter, l locks.Lease, granted bool) {
	status := http.StatusOK
	if granted {
		w.Header().Set("Lock-Token", l.Token)
		if !l.Reentrant {
			status = http.StatusCreated
		}
	}
	writeLeaseJSON(w, status, toLeaseResponse(l, granted))
}

// keepaliveResponse describes the keep-alive of a lease the service renews.
type keepaliveResponse struct {
	MaxHoldUntil time.Time  `json:"max_hold_until"`
	HeartbeatMS  int64      `json:"heartbeat_ms,omitempty"`
	HeartbeatDue *time.Time `json:"heartbeat_due,omitempty"`
}

func toKeepaliveResponse(ka *locks.Keepalive) *keepaliveResponse {
	if ka == nil {
		return nil
	}
	resp := &keepaliveResponse{MaxHoldUntil: ka.Until, HeartbeatMS: ka.Heartbeat.Milliseconds()}
	if !ka.HeartbeatDue.IsZero() {
		resp.HeartbeatDue = &ka.HeartbeatDue
	}
	return resp
}

// lockName returns the {name} path parameter as the client meant it; the
// service checks it. chi matches routes on the raw (still percent-encoded)
// path when the request has one, so the parameter is decoded then, once:
// job%3A42 is job:42, while a%2Fb and %7B reach the service as a/b and {
// (and are refused there), and job%253A42 as job%3A42.
func lockName(r *http.Request) string { return pathParam(r, "name") }

// pathParam is the route parameter param of r, percent-decoded when the
// path was sent encoded. A malformed escape stays as it is: no lock name
// has a '%', and a rate-limit key's '%' is sent as %25.
func pathParam(r *http.Request, param string) string {
	v := chi.URLParam(r, param)
	if r.URL.RawPath != "" {
		if decoded, err := url.PathUnescape(v); err == nil {
			v = decoded
		}
	}
	return v
}

// errTokenRequired refuses a renew or release without its Lock-Token.
var errTokenRequired = badRequest("Lock-Token", "required", "the Lock-Token header is required: send the token returned by acquire")

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
