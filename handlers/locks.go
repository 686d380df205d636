package handlers

import (
	"context"
	"crypto/subtle"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/latchkey/latchkey/service/locks"
)

// acquireRequest is the body of POST /v1/locks/{name}; every field is optional.
type acquireRequest struct {
	TTL       string `json:"ttl" validate:"omitempty,posduration"`
	Wait      string `json:"wait" validate:"omitempty,duration"`
	Keepalive *bool  `json:"keepalive"`
	MaxHold   string `json:"max_hold" validate:"omitempty,posduration"`
	Heartbeat string `json:"heartbeat" validate:"omitempty,posduration"`
	Fair      *bool  `json:"fair"`
	Owner     string `json:"owner"` // checked by the service (locks.ValidateOwner)
}

// renewRequest is the body of POST /v1/locks/{name}/renew.
type renewRequest struct {
	TTL string `json:"ttl" validate:"omitempty,posduration"`
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

// decodeLockRequest reads what acquiring and holding a lock share: the lock
// name, the optional Lock-Token and the JSON body (into body). The name,
// the token and the body's owner text are checked by the service.
func (a *api) decodeLockRequest(w http.ResponseWriter, r *http.Request, body any) (name, token string, err error) {
	if err = a.decodeJSON(w, r, body); err != nil {
		return "", "", err
	}
	return lockName(r), r.Header.Get("Lock-Token"), nil
}

// handleAcquireLock implements operationId acquireLock. Returns the errors
// of decoding the request and of locks.Service.Acquire, or an
// *interruptedError when a shutdown cut its wait short.
func (a *api) handleAcquireLock(w http.ResponseWriter, r *http.Request) error {
	var req acquireRequest
	name, token, err := a.decodeLockRequest(w, r, &req)
	if err != nil {
		return err
	}
	wait := parseDuration(req.Wait)
	ctx := r.Context()
	if wait > 0 {
		a.allowWait(w, wait)
		var cancel context.CancelFunc
		ctx, cancel = a.untilStopping(r)
		defer cancel()
	}
	lease, err := a.svc.Acquire(ctx, name, locks.AcquireRequest{
		Token: token,
		TTL:   parseDuration(req.TTL),
		Wait:  wait,
		Fair:  req.Fair != nil && *req.Fair,

		Keepalive: req.Keepalive != nil && *req.Keepalive,
		MaxHold:   parseDuration(req.MaxHold),
		Heartbeat: parseDuration(req.Heartbeat),
		Owner:     req.Owner,
	})
	if err != nil {
		return waitError(ctx, err)
	}
	w.Header().Set("Lock-Token", lease.Token)
	w.Header().Set("Location", lockLocation(name))
	status := http.StatusCreated
	if lease.Reentrant {
		status = http.StatusOK
	}
	writeLeaseJSON(w, status, toLeaseResponse(lease, true))
	return nil
}

// handleGetLock implements operationId getLock. Returns the errors of
// locks.Service.Inspect, which checks the name and the optional token.
func (a *api) handleGetLock(w http.ResponseWriter, r *http.Request) error {
	name, token := lockName(r), r.Header.Get("Lock-Token")
	st, err := a.svc.Inspect(r.Context(), name, token)
	if err != nil {
		return err
	}
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
	if token != "" {
		resp.Owned = &st.Owned
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// handleRenewLock implements operationId renewLock. Returns the errors of
// decoding the request and of locks.Service.Renew.
func (a *api) handleRenewLock(w http.ResponseWriter, r *http.Request) error {
	token, ttl, err := a.decodeRenew(w, r)
	if err != nil {
		return err
	}
	lease, err := a.svc.Renew(r.Context(), lockName(r), token, ttl)
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
	return a.releaseOrForce(w, r, func(ctx context.Context, name string) error {
		_, err := a.svc.ForceRelease(ctx, name)
		return err
	}, func(ctx context.Context, name, token string) (any, error) {
		rel, err := a.svc.Release(ctx, name, token)
		return releaseResponse{Released: rel.Released, HoldCount: rel.HoldCount}, err
	})
}

// releaseOrForce serves a DELETE of a lock primitive's name: with
// ?force=true the admin's force (204), the credential checked first; else
// the release of the Lock-Token's lease, whose answer release returns.
// Returns the errors of reading the request, a forbidden error without the
// admin credential, and those of force and release.
func (a *api) releaseOrForce(w http.ResponseWriter, r *http.Request, force func(ctx context.Context, name string) error,
	release func(ctx context.Context, name, token string) (any, error)) error {
	name := lockName(r)
	forced, err := forceParam(r)
	if err != nil {
		return err
	}
	if forced {
		if err := a.checkAdmin(r); err != nil {
			return err
		}
		if err := force(r.Context(), name); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	token, err := requireToken(r)
	if err != nil {
		return err
	}
	resp, err := release(r.Context(), name, token)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
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

// forceParam reads the optional ?force= of a release. Returns an
// invalid-request error when it is not a boolean.
func forceParam(r *http.Request) (bool, error) {
	v := r.URL.Query().Get("force")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("force", "boolean", "force must be true or false, got "+strconv.Quote(v))
	}
	return b, nil
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

// requireToken returns the Lock-Token header, which renew and release need;
// its format is the service's to check.
func requireToken(r *http.Request) (string, error) {
	token := r.Header.Get("Lock-Token")
	if token == "" {
		return "", badRequest("Lock-Token", "required", "the Lock-Token header is required: send the token returned by acquire")
	}
	return token, nil
}

// checkAdmin requires Authorization: Bearer <admin key>.
func (a *api) checkAdmin(r *http.Request) error {
	if a.cfg.AdminKey == "" {
		return &httpError{typ: forbidden,
			detail: "admin actions are disabled: the server has no admin key configured (LATCHKEY_ADMIN_KEY)"}
	}
	// The scheme is case-insensitive (RFC 9110 §11.1): "bearer" is Bearer.
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), []byte(a.cfg.AdminKey)) != 1 {
		return &httpError{typ: forbidden,
			detail: "force-release needs the admin credential: Authorization: Bearer <admin key>"}
	}
	return nil
}
