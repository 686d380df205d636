package handlers

import (
	"context"
	"errors"
	"net/http"
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
	WaitedMS  int64              `json:"waited_ms,omitempty"`
}

// semaphoreStateResponse is the answer to GET and PUT /v1/semaphores/{name}.
// It never holds a token.
type semaphoreStateResponse struct {
	Name            string                  `json:"name"`
	Permits         int64                   `json:"permits"`
	InUse           int64                   `json:"in_use"`
	Available       int64                   `json:"available"`
	Holders         int64                   `json:"holders"`
	Waiters         int64                   `json:"waiters"`
	Fair            bool                    `json:"fair"`
	Fence           int64                   `json:"fence"`
	Owned           *bool                   `json:"owned,omitempty"`
	Lease           *semaphoreOwnedResponse `json:"lease,omitempty"`
	LostReason      string                  `json:"lost_reason,omitempty"`
	Leases          []heldLeaseResponse     `json:"leases"`
	LeasesTruncated bool                    `json:"leases_truncated"`
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
		TTLMS: l.TTL.Milliseconds(), ExpiresAt: l.ExpiresAt, Keepalive: toKeepaliveResponse(l.Keepalive),
		WaitedMS: l.Waited.Milliseconds()}
	if granted {
		resp.Permits, resp.Available = l.Permits, &l.Available
	} else {
		resp.Token = ""
	}
	return resp
}

func toSemaphoreStateResponse(st locks.SemaphoreState, withToken bool) semaphoreStateResponse {
	resp := semaphoreStateResponse{Name: st.Name, Permits: st.Permits, InUse: st.InUse, Available: st.Available(),
		Holders: st.Holders, Waiters: st.Waiters, Fair: st.Fair, Fence: st.Fence, LostReason: st.LostReason,
		Leases: toHeldLeaseResponses(st.Leases), LeasesTruncated: st.LeasesTruncated}
	if withToken {
		resp.Owned = &st.Owned
	}
	if l := st.Lease; l != nil {
		resp.Lease = &semaphoreOwnedResponse{Count: l.Count, Fence: l.Fence, TTLMS: l.TTL.Milliseconds(),
			ExpiresAt: l.ExpiresAt, Keepalive: toKeepaliveResponse(l.Keepalive), Owner: st.Owner}
	}
	return resp
}

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

// semaphorePrimitive describes the semaphore, under /v1/semaphores/: its
// bodies add the permits to a lock's, and its leases answer with their
// count of permits (answerSemaphoreLease). Changing its permits is its own
// route (handleSetSemaphorePermits).
func (a *api) semaphorePrimitive() *primitive[semaphoreAcquireRequest, semaphoreHoldRequest, locks.SemaphoreRequest, locks.SemaphoreLease] {
	return &primitive[semaphoreAcquireRequest, semaphoreHoldRequest, locks.SemaphoreRequest, locks.SemaphoreLease]{
		a: a, base: "/v1/semaphores/", target: anyLease,
		acquire: a.svc.AcquireSemaphore, hold: a.svc.HoldSemaphore, answer: answerSemaphoreLease,
		renew:   modeless(a.svc.RenewSemaphore),
		release: a.releaseSemaphore, force: forced(a.svc.ForceReleaseSemaphore), inspect: a.inspectSemaphore,
		watchKind: "semaphore", watchState: semaphoreWatchState,
	}
}

// answerSemaphoreLease answers a semaphore lease: granted (201), with its
// Lock-Token and the semaphore's permits and those still free, or renewed
// (200, no token).
func answerSemaphoreLease(w http.ResponseWriter, l locks.SemaphoreLease, granted bool) {
	status := http.StatusOK
	if granted {
		w.Header().Set("Lock-Token", l.Token)
		status = http.StatusCreated
	}
	writeJSON(w, status, toSemaphoreLeaseResponse(l, granted))
}

// handleSetSemaphorePermits implements operationId setSemaphorePermits (an
// admin action). Returns a forbidden error without the admin credential
// (checked first, as for a force-release), and the errors of decoding the
// request and of locks.Service.SetSemaphorePermits.
func (a *api) handleSetSemaphorePermits(w http.ResponseWriter, r *http.Request) error {
	if err := a.checkAdminTo(r, "changing a semaphore's permits"); err != nil {
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

// inspectSemaphore is the state of the semaphore name, with the lease of
// token (when given). Returns the errors of locks.Service.InspectSemaphore.
func (a *api) inspectSemaphore(ctx context.Context, name, token string) (any, error) {
	st, err := a.svc.InspectSemaphore(ctx, name, token)
	if err != nil {
		return nil, err
	}
	return toSemaphoreStateResponse(st, token != ""), nil
}

// releaseSemaphore gives back token's permits of the semaphore name.
// Returns the errors of locks.Service.ReleaseSemaphore.
func (a *api) releaseSemaphore(ctx context.Context, name, token string, _ locks.RWMode) (any, error) {
	n, err := a.svc.ReleaseSemaphore(ctx, name, token)
	if err != nil {
		return nil, err
	}
	return semaphoreReleaseResponse{Released: true, Count: n}, nil
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
