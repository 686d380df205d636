package handlers

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/latchkey/latchkey/service/locks"
)

// acquireRequest is the body of POST /v1/locks/{name}: a hold's body
// (ttl, wait, fair, owner) and the keep-alive fields; every field is
// optional.
type acquireRequest struct {
	holdRequest
	Keepalive *bool   `json:"keepalive"`
	MaxHold   *string `json:"max_hold" validate:"omitempty,posduration"`
	Heartbeat *string `json:"heartbeat" validate:"omitempty,posduration"`
}

// renewRequest is the body of POST /v1/locks/{name}/renew: an optional ttl
// (absent or null: the lease's own).
type renewRequest struct {
	TTL *string `json:"ttl" validate:"omitempty,posduration"`
}

// leaseResponse is a granted or renewed lease.
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
}

// lockStateResponse is the answer to GET /v1/locks/{name}. It never holds a token.
type lockStateResponse struct {
	Name       string             `json:"name"`
	Held       bool               `json:"held"`
	HoldCount  int64              `json:"hold_count"`
	TTLMS      int64              `json:"ttl_ms"`
	ExpiresAt  *time.Time         `json:"expires_at,omitempty"`
	Fence      int64              `json:"fence"`
	Owned      *bool              `json:"owned,omitempty"`
	Waiters    int64              `json:"waiters"`
	Fair       bool               `json:"fair"`
	Keepalive  *keepaliveResponse `json:"keepalive,omitempty"`
	Owner      string             `json:"owner,omitempty"`
	GrantedAt  *time.Time         `json:"granted_at,omitempty"`
	LostReason string             `json:"lost_reason,omitempty"`
}

// releaseResponse is the answer to DELETE /v1/locks/{name}.
type releaseResponse struct {
	Released  bool  `json:"released"`
	HoldCount int64 `json:"hold_count"`
}

func toLeaseResponse(l locks.Lease, withToken bool) leaseResponse {
	resp := leaseResponse{Name: l.Name, Fence: l.Fence, HoldCount: l.HoldCount,
		TTLMS: l.TTL.Milliseconds(), ExpiresAt: l.ExpiresAt, Reentrant: l.Reentrant,
		Keepalive: toKeepaliveResponse(l.Keepalive), Mode: string(l.Mode)}
	if withToken {
		resp.Token = l.Token
	}
	return resp
}

func lockLocation(name string) string { return "/v1/locks/" + url.PathEscape(name) }

// lockBody is a JSON body that takes a lease (B, every one a holdRequest
// with more fields), with the service's request it makes under a token
// (R).
type lockBody[B, R any] interface {
	*B
	serviceRequest(token string) R
	wait() time.Duration
}

// decodeLockRequest reads what acquiring and holding a lease of every
// primitive share: the name, the optional Lock-Token and the JSON body,
// of type B; req is the service's request they make. The name, the token
// and the body's owner text are checked by the service. Returns the errors
// of decodeJSON.
func decodeLockRequest[B, R any, PB lockBody[B, R]](a *api, w http.ResponseWriter, r *http.Request) (name string, body PB, req R, err error) {
	body = PB(new(B))
	if err = a.decodeJSON(w, r, body); err != nil {
		return "", nil, req, err
	}
	token, err := lockToken(r)
	if err != nil {
		return "", nil, req, err
	}
	return lockName(r), body, body.serviceRequest(token), nil
}

// handleAcquireLock implements operationId acquireLock. Returns the errors
// of decoding the request and of locks.Service.Acquire, or an
// *interruptedError when a shutdown cut its wait short.
func (a *api) handleAcquireLock(w http.ResponseWriter, r *http.Request) error {
	_, _, req, err := decodeLockRequest[acquireRequest, locks.AcquireRequest](a, w, r)
	if err != nil {
		return err
	}
	return a.acquire(w, r, false, req)
}

// serviceRequest is req as the service takes it, under token.
func (req acquireRequest) serviceRequest(token string) locks.AcquireRequest {
	lr := req.holdRequest.serviceRequest(token)
	lr.Keepalive = req.Keepalive != nil && *req.Keepalive
	lr.MaxHold = parseDuration(req.MaxHold)
	lr.Heartbeat = parseDuration(req.Heartbeat)
	return lr
}

// acquire takes the lease req asks for, of the read/write lock name (rw)
// or the exclusive lock, waiting when req says so, and answers it (201 new,
// 200 reentrant) with its token and location. Returns the errors of the
// service's acquire, or an *interruptedError when a shutdown cut its wait
// short.
func (a *api) acquire(w http.ResponseWriter, r *http.Request, rw bool, req locks.AcquireRequest) error {
	name := lockName(r)
	ctx, cancel := a.waitContext(w, r, req.Wait)
	defer cancel()
	var lease locks.Lease
	var err error
	if rw {
		lease, err = a.svc.AcquireRW(ctx, name, req)
	} else {
		lease, err = a.svc.Acquire(ctx, name, req)
	}
	if err != nil {
		return waitError(ctx, err)
	}
	w.Header().Set("Lock-Token", lease.Token)
	if rw {
		w.Header().Set("Location", rwLockLocation(name))
	} else {
		w.Header().Set("Location", lockLocation(name))
	}
	status := http.StatusCreated
	if lease.Reentrant {
		status = http.StatusOK
	}
	writeLeaseJSON(w, status, toLeaseResponse(lease, true))
	return nil
}

// handleGetLock implements operationId getLock. Returns the errors of
// reading the optional Lock-Token and of locks.Service.Inspect, which checks
// the name and the token.
func (a *api) handleGetLock(w http.ResponseWriter, r *http.Request) error {
	token, err := lockToken(r)
	if err != nil {
		return err
	}
	name := lockName(r)
	st, err := a.svc.Inspect(r.Context(), name, token)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toLockStateResponse(st, token != ""))
	return nil
}

// toLockStateResponse is the body of GET /v1/locks/{name}, and an item of
// GET /v1/locks; withToken says the state was read with a Lock-Token.
func toLockStateResponse(st locks.LockState, withToken bool) lockStateResponse {
	resp := lockStateResponse{Name: st.Name, Held: st.Held, HoldCount: st.HoldCount,
		TTLMS: st.TTL.Milliseconds(), Fence: st.Fence, Waiters: st.Waiters, Fair: st.Fair,
		Keepalive: toKeepaliveResponse(st.Keepalive), LostReason: st.LostReason}
	if st.Held {
		resp.ExpiresAt = &st.ExpiresAt
		resp.Owner = st.Owner
		if !st.GrantedAt.IsZero() {
			resp.GrantedAt = &st.GrantedAt
		}
	}
	if withToken {
		resp.Owned = &st.Owned
	}
	return resp
}

// handleRenewLock implements operationId renewLock. Returns the errors of
// decoding the request and of locks.Service.Renew.
func (a *api) handleRenewLock(w http.ResponseWriter, r *http.Request) error {
	return a.renew(w, r, false)
}

// renew extends the lease the request's Lock-Token owns, of the read/write
// lock (rw: every lease of the token unless ?mode= names one) or of the
// exclusive lock, and answers it. Returns the errors of decoding the request
// and of the service's renew.
func (a *api) renew(w http.ResponseWriter, r *http.Request, rw bool) error {
	var mode locks.RWMode
	if rw {
		var err error
		if mode, err = modeParam(r); err != nil {
			return err
		}
	}
	token, ttl, err := a.decodeRenew(w, r)
	if err != nil {
		return err
	}
	var lease locks.Lease
	if rw {
		lease, err = a.svc.RenewRW(r.Context(), lockName(r), token, mode, ttl)
	} else {
		lease, err = a.svc.Renew(r.Context(), lockName(r), token, ttl)
	}
	if err != nil {
		return err
	}
	writeLeaseJSON(w, http.StatusOK, toLeaseResponse(lease, false))
	return nil
}

// handleReleaseLock implements operationId releaseLock, and with
// ?force=true the admin force-release. Returns the errors of reading the
// request, a forbidden error without the admin credential, and the errors
// of locks.Service.Release and ForceRelease. A force-release checks the
// credential first: without it the answer is 403 whatever the name, as a
// service that checks access before input tells no one without access what
// it would accept.
func (a *api) handleReleaseLock(w http.ResponseWriter, r *http.Request) error {
	token, err := a.releaseOrForce(w, r, a.svc.ForceRelease)
	if token == "" || err != nil {
		return err
	}
	rel, err := a.svc.Release(r.Context(), lockName(r), token)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, releaseResponse{Released: rel.Released, HoldCount: rel.HoldCount})
	return nil
}

// releaseOrForce is what a release of any lock primitive starts with: with
// ?force=true it checks the admin credential, runs force and answers 204
// (returning no token); otherwise it returns the Lock-Token to release.
// Returns the errors of reading the request, a forbidden error without the
// admin credential, and force's errors.
func (a *api) releaseOrForce(w http.ResponseWriter, r *http.Request, force func(context.Context, string) (bool, error)) (string, error) {
	forced, err := forceParam(r)
	if err != nil {
		return "", err
	}
	if forced {
		if err := a.checkAdmin(r); err != nil {
			return "", err
		}
		if _, err := force(r.Context(), lockName(r)); err != nil {
			return "", err
		}
		w.WriteHeader(http.StatusNoContent)
		return "", nil
	}
	return requireToken(r)
}

// decodeRenew reads what a renew of any lock primitive sends: the body's
// optional ttl and the required Lock-Token.
func (a *api) decodeRenew(w http.ResponseWriter, r *http.Request) (token string, ttl time.Duration, err error) {
	var req renewRequest
	if err := a.decodeJSON(w, r, &req); err != nil {
		return "", 0, err
	}
	token, err = requireToken(r)
	return token, parseDuration(req.TTL), err
}

// lockName returns the {name} path parameter as the client meant it; the
// service checks it. chi matches routes on the raw (still percent-encoded)
// path when the request has one, so the parameter is decoded then, once:
// job%3A42 is job:42, while a%2Fb and %7B reach the service as a/b and {
// (and are refused there), and job%253A42 as job%3A42.
func lockName(r *http.Request) string {
	name := chi.URLParam(r, "name")
	if r.URL.RawPath != "" {
		// A malformed escape stays as it is: no name has a '%'.
		if decoded, err := url.PathUnescape(name); err == nil {
			name = decoded
		}
	}
	return name
}

// lockToken returns the optional Lock-Token header; its format is the
// service's to check. Returns an invalid-request error when it is sent more
// than once.
func lockToken(r *http.Request) (string, error) { return singleHeader(r, "Lock-Token") }

// requireToken returns the Lock-Token header, which renew and release need
// (see lockToken).
func requireToken(r *http.Request) (string, error) {
	token, err := lockToken(r)
	if err != nil {
		return "", err
	}
	if token == "" {
		return "", badRequest("Lock-Token", "required", "the Lock-Token header is required: send the token returned by acquire")
	}
	return token, nil
}
