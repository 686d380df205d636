package handlers

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// semaphorePermits are the fields every body that takes permits holds.
// Permits is a pointer so that a missing permits is told from 0.
type semaphorePermits struct {
	Permits *int64 `json:"permits" validate:"required,min=1,max=1000000"`
	Count   *int64 `json:"count" validate:"omitempty,min=1,max=1000000"` // at most permits: checked by the service
}

// semaphoreAcquireRequest is the body of POST /v1/semaphores/{name}: the
// permits and the acquire fields of a lock.
type semaphoreAcquireRequest struct {
	semaphorePermits
	acquireRequest
}

// semaphoreHoldRequest is the body of POST /v1/semaphores/{name}/hold: the
// permits and the hold fields of a lock.
type semaphoreHoldRequest struct {
	semaphorePermits
	holdRequest
}

// semaphorePermitsRequest is the body of PUT /v1/semaphores/{name}.
type semaphorePermitsRequest struct {
	Permits *int64 `json:"permits" validate:"required,min=1,max=1000000"`
}

// semaphoreLeaseResponse is a granted or renewed semaphore lease.
type semaphoreLeaseResponse struct {
	Name      string             `json:"name"`
	Token     string             `json:"token,omitempty"`
	Count     int64              `json:"count"`
	Permits   int64              `json:"permits,omitempty"`
	Available *int64             `json:"available,omitempty"`
	Fence     int64              `json:"fence"`
	TTLMS     int64              `json:"ttl_ms"`
	ExpiresAt time.Time          `json:"expires_at"`
	Keepalive *keepaliveResponse `json:"keepalive,omitempty"`
}

// semaphoreStateResponse is the answer to GET and PUT /v1/semaphores/{name}.
// It never holds a token.
type semaphoreStateResponse struct {
	Name       string                  `json:"name"`
	Permits    int64                   `json:"permits"`
	InUse      int64                   `json:"in_use"`
	Available  int64                   `json:"available"`
	Holders    int64                   `json:"holders"`
	Waiters    int64                   `json:"waiters"`
	Fair       bool                    `json:"fair"`
	Fence      int64                   `json:"fence"`
	Owned      *bool                   `json:"owned,omitempty"`
	Lease      *semaphoreOwnedResponse `json:"lease,omitempty"`
	LostReason string                  `json:"lost_reason,omitempty"`
}

// semaphoreOwnedResponse is the lease the token given to GET holds.
type semaphoreOwnedResponse struct {
	Count     int64              `json:"count"`
	Fence     int64              `json:"fence"`
	TTLMS     int64              `json:"ttl_ms"`
	ExpiresAt time.Time          `json:"expires_at"`
	Keepalive *keepaliveResponse `json:"keepalive,omitempty"`
	Owner     string             `json:"owner,omitempty"`
}

// semaphoreReleaseResponse is the answer to DELETE /v1/semaphores/{name}.
type semaphoreReleaseResponse struct {
	Released bool  `json:"released"`
	Count    int64 `json:"count"`
}

func toSemaphoreLeaseResponse(l locks.SemaphoreLease, granted bool) semaphoreLeaseResponse {
	resp := semaphoreLeaseResponse{Name: l.Name, Token: l.Token, Count: l.Count, Fence: l.Fence,
		TTLMS: l.TTL.Milliseconds(), ExpiresAt: l.ExpiresAt, Keepalive: toKeepaliveResponse(l.Keepalive)}
	if granted {
		resp.Permits, resp.Available = l.Permits, &l.Available
	} else {
		resp.Token = ""
	}
	return resp
}

func toSemaphoreStateResponse(st locks.SemaphoreState, withToken bool) semaphoreStateResponse {
	resp := semaphoreStateResponse{Name: st.Name, Permits: st.Permits, InUse: st.InUse, Available: st.Available(),
		Holders: st.Holders, Waiters: st.Waiters, Fair: st.Fair, Fence: st.Fence, LostReason: st.LostReason}
	if withToken {
		resp.Owned = &st.Owned
	}
	if l := st.Lease; l != nil {
		resp.Lease = &semaphoreOwnedResponse{Count: l.Count, Fence: l.Fence, TTLMS: l.TTL.Milliseconds(),
			ExpiresAt: l.ExpiresAt, Keepalive: toKeepaliveResponse(l.Keepalive), Owner: st.Owner}
	}
	return resp
}

func semaphoreLocation(name string) string { return "/v1/semaphores/" + url.PathEscape(name) }

// semaphoreRequest is the service's request for these permits and a
// lock's request lr.
func (p semaphorePermits) semaphoreRequest(lr locks.AcquireRequest) locks.SemaphoreRequest {
	var count int64 // the service's default
	if p.Count != nil {
		count = *p.Count
	}
	return locks.SemaphoreRequest{Permits: *p.Permits, Count: count, AcquireRequest: lr} // required
}

// serviceRequest is req as the service takes it, under token.
func (req semaphoreAcquireRequest) serviceRequest(token string) locks.SemaphoreRequest {
	return req.semaphoreRequest(req.acquireRequest.serviceRequest(token))
}

// serviceRequest is req as the service takes it, under token.
func (req semaphoreHoldRequest) serviceRequest(token string) locks.SemaphoreRequest {
	return req.semaphoreRequest(req.holdRequest.serviceRequest(token))
}

// handleHoldSemaphore implements operationId holdSemaphore: permits held
// for as long as the connection stays open, streamed as handleHoldLock
// streams a lock's lease (streamHold); the events' hold_count is the
// permits held. Returns the errors of decoding the request and of
// locks.Service.HoldSemaphore; once the stream has started it returns nil.
func (a *api) handleHoldSemaphore(w http.ResponseWriter, r *http.Request) error {
	return holdLease[semaphoreHoldRequest](a, w, r, semaphoreLocation, a.svc.HoldSemaphore)
}

// handleAcquireSemaphore implements operationId acquireSemaphore. Returns
// the errors of decoding the request and of
// locks.Service.AcquireSemaphore, or an *interruptedError when a shutdown
// cut its wait short.
func (a *api) handleAcquireSemaphore(w http.ResponseWriter, r *http.Request) error {
	name, _, req, err := decodeLockRequest[semaphoreAcquireRequest, locks.SemaphoreRequest](a, w, r)
	if err != nil {
		return err
	}
	ctx, cancel := a.waitContext(w, r, req.Wait)
	defer cancel()
	lease, err := a.svc.AcquireSemaphore(ctx, name, req)
	if err != nil {
		return waitError(ctx, err)
	}
	w.Header().Set("Lock-Token", lease.Token)
	w.Header().Set("Location", semaphoreLocation(name))
	writeJSON(w, http.StatusCreated, toSemaphoreLeaseResponse(lease, true))
	return nil
}

// handleGetSemaphore implements operationId getSemaphore. Returns the
// errors of reading the optional Lock-Token and of
// locks.Service.InspectSemaphore.
func (a *api) handleGetSemaphore(w http.ResponseWriter, r *http.Request) error {
	token, err := lockToken(r)
	if err != nil {
		return err
	}
	st, err := a.svc.InspectSemaphore(r.Context(), lockName(r), token)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSemaphoreStateResponse(st, token != ""))
	return nil
}

// handleSetSemaphorePermits implements operationId setSemaphorePermits (an
// admin action). Returns a forbidden error without the admin credential
// (checked first, as for a force-release), and the errors of decoding the
// request and of locks.Service.SetSemaphorePermits.
func (a *api) handleSetSemaphorePermits(w http.ResponseWriter, r *http.Request) error {
	if err := a.checkAdmin(r); err != nil {
		if he := (*httpError)(nil); a.cfg.AdminKey != "" && errors.As(err, &he) && he.typ == forbidden {
			err = &httpError{typ: forbidden,
				detail: "changing a semaphore's permits needs the admin credential: Authorization: Bearer <admin key>"}
		}
		return err
	}
	var body semaphorePermitsRequest
	if err := a.decodeJSON(w, r, &body); err != nil {
		return err
	}
	st, err := a.svc.SetSemaphorePermits(r.Context(), lockName(r), *body.Permits) // required
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSemaphoreStateResponse(st, false))
	return nil
}

// handleRenewSemaphore implements operationId renewSemaphore. Returns the
// errors of decoding the request and of locks.Service.RenewSemaphore.
func (a *api) handleRenewSemaphore(w http.ResponseWriter, r *http.Request) error {
	token, ttl, err := a.decodeRenew(w, r)
	if err != nil {
		return err
	}
	lease, err := a.svc.RenewSemaphore(r.Context(), lockName(r), token, ttl)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSemaphoreLeaseResponse(lease, false))
	return nil
}

// handleReleaseSemaphore implements operationId releaseSemaphore, and with
// ?force=true the admin force-release of every lease. Returns the errors
// of reading the request, a forbidden error without the admin credential
// (checked before the name), and the errors of
// locks.Service.ReleaseSemaphore and ForceReleaseSemaphore.
func (a *api) handleReleaseSemaphore(w http.ResponseWriter, r *http.Request) error {
	token, err := a.releaseOrForce(w, r, func(ctx context.Context, name string) (bool, error) {
		n, err := a.svc.ForceReleaseSemaphore(ctx, name)
		return n > 0, err
	})
	if token == "" || err != nil {
		return err
	}
	n, err := a.svc.ReleaseSemaphore(r.Context(), lockName(r), token)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, semaphoreReleaseResponse{Released: true, Count: n})
	return nil
}

func permitsMismatchDetail(err error) string {
	var pm *locks.PermitsMismatchError
	errors.As(err, &pm)
	return "the semaphore has " + strconv.FormatInt(pm.Permits, 10) + " permits: acquire it with \"permits\": " +
		strconv.FormatInt(pm.Permits, 10) + ", or have an administrator change them (PUT)"
}

func permitsUnavailableDetail(err error) string {
	var pu *locks.PermitsUnavailableError
	errors.As(err, &pu)
	return "not enough permits are free (" + strconv.FormatInt(pu.Available, 10) +
		" free, or earlier waiters of a fair semaphore go first)"
}

// permitsRetryAfter tells a client when permits may be free: when the
// first lease expires.
func permitsRetryAfter(h http.Header, err error) {
	var pu *locks.PermitsUnavailableError
	errors.As(err, &pu)
	h.Set("Retry-After", retryAfterSeconds(pu.RetryAfter))
}
