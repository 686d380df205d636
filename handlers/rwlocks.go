package handlers

import (
	"net/http"
	"net/url"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// rwAcquireRequest is the body of POST /v1/rwlocks/{name}: the mode
// (required) and the acquire fields of a lock.
type rwAcquireRequest struct {
	Mode *string `json:"mode" validate:"required,oneof=read write"`
	acquireRequest
}

// rwHoldRequest is the body of POST /v1/rwlocks/{name}/hold.
type rwHoldRequest struct {
	Mode *string `json:"mode" validate:"required,oneof=read write"`
	holdRequest
}

// rwStateResponse is the answer to GET /v1/rwlocks/{name}. It never holds a token.
type rwStateResponse struct {
	Name       string             `json:"name"`
	WriteHeld  bool               `json:"write_held"`
	Readers    int64              `json:"readers"`
	Fence      int64              `json:"fence"`
	Waiters    rwWaitersResponse  `json:"waiters"`
	Fair       bool               `json:"fair"`
	Owned      *bool              `json:"owned,omitempty"`
	Mode       string             `json:"mode,omitempty"`
	Modes      []string           `json:"modes,omitempty"`
	HoldCount  int64              `json:"hold_count,omitempty"`
	TTLMS      int64              `json:"ttl_ms,omitempty"`
	ExpiresAt  *time.Time         `json:"expires_at,omitempty"`
	Keepalive  *keepaliveResponse `json:"keepalive,omitempty"`
	Owner      string             `json:"owner,omitempty"`
	LostReason string             `json:"lost_reason,omitempty"`
}

// rwWaitersResponse counts a read/write lock's waiters by mode.
type rwWaitersResponse struct {
	Read  int64 `json:"read"`
	Write int64 `json:"write"`
}

// rwReleaseResponse is the answer to DELETE /v1/rwlocks/{name}.
type rwReleaseResponse struct {
	Released  bool   `json:"released"`
	HoldCount int64  `json:"hold_count"`
	Mode      string `json:"mode"`
}

// serviceRequest is req as the service takes it, under token.
func (req rwAcquireRequest) serviceRequest(token string) locks.AcquireRequest {
	lr := req.acquireRequest.serviceRequest(token)
	lr.Mode = locks.RWMode(*req.Mode) // required
	return lr
}

// serviceRequest is req as the service takes it, under token.
func (req rwHoldRequest) serviceRequest(token string) locks.AcquireRequest {
	lr := req.holdRequest.serviceRequest(token)
	lr.Mode = locks.RWMode(*req.Mode) // required
	return lr
}

func rwLockLocation(name string) string { return "/v1/rwlocks/" + url.PathEscape(name) }

// modeParam reads the optional ?mode= naming the lease to release or renew:
// absent it is "" (the service's default); given once, it is exactly read
// or write. Returns queryParam's errors, and an invalid-request error
// naming mode for any other value (READ, an empty mode=).
func modeParam(r *http.Request) (locks.RWMode, error) {
	mode, _, err := oneOfParam(r, "mode", string(locks.ModeRead), string(locks.ModeWrite))
	return locks.RWMode(mode), err
}

// handleAcquireRWLock implements operationId acquireRWLock. Returns the
// errors of decoding the request and of locks.Service.AcquireRW, or an
// *interruptedError when a shutdown cut its wait short.
func (a *api) handleAcquireRWLock(w http.ResponseWriter, r *http.Request) error {
	_, _, req, err := decodeLockRequest[rwAcquireRequest, locks.AcquireRequest](a, w, r)
	if err != nil {
		return err
	}
	return a.acquire(w, r, true, req)
}

// handleGetRWLock implements operationId getRWLock. Returns the errors of
// reading the optional Lock-Token and of locks.Service.InspectRW.
func (a *api) handleGetRWLock(w http.ResponseWriter, r *http.Request) error {
	token, err := lockToken(r)
	if err != nil {
		return err
	}
	name := lockName(r)
	st, err := a.svc.InspectRW(r.Context(), name, token)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toRWStateResponse(st, token != ""))
	return nil
}

// toRWStateResponse is the body of GET /v1/rwlocks/{name}, and an item of
// GET /v1/rwlocks; withToken says the state was read with a Lock-Token.
func toRWStateResponse(st locks.RWState, withToken bool) rwStateResponse {
	resp := rwStateResponse{Name: st.Name, WriteHeld: st.WriteHeld, Readers: st.Readers, Fence: st.Fence,
		Waiters: rwWaitersResponse{Read: st.WaitingReaders, Write: st.WaitingWriters}, Fair: st.Fair,
		LostReason: st.LostReason}
	if withToken {
		resp.Owned = &st.Owned
	}
	if st.Owned {
		resp.Mode, resp.HoldCount, resp.TTLMS = string(st.Mode), st.HoldCount, st.TTL.Milliseconds()
		for _, m := range st.Modes {
			resp.Modes = append(resp.Modes, string(m))
		}
		resp.ExpiresAt = &st.ExpiresAt
		resp.Keepalive = toKeepaliveResponse(st.Keepalive)
		resp.Owner = st.Owner
	}
	return resp
}

// handleRenewRWLock implements operationId renewRWLock. Returns the errors
// of decoding the request and of locks.Service.RenewRW.
func (a *api) handleRenewRWLock(w http.ResponseWriter, r *http.Request) error {
	return a.renew(w, r, true)
}

// handleReleaseRWLock implements operationId releaseRWLock, and with
// ?force=true the admin force-release of every holder. Returns the errors
// of reading the request, a forbidden error without the admin credential,
// and the errors of locks.Service.ReleaseRW and ForceReleaseRW.
func (a *api) handleReleaseRWLock(w http.ResponseWriter, r *http.Request) error {
	mode, err := modeParam(r)
	if err != nil {
		return err
	}
	token, err := a.releaseOrForce(w, r, a.svc.ForceReleaseRW)
	if token == "" || err != nil {
		return err
	}
	rel, err := a.svc.ReleaseRW(r.Context(), lockName(r), token, mode)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rwReleaseResponse{Released: rel.Released, HoldCount: rel.HoldCount, Mode: string(rel.Mode)})
	return nil
}

// handleHoldRWLock implements operationId holdRWLock: a connection-scoped
// read or write lease streamed as Server-Sent Events, as handleHoldLock.
func (a *api) handleHoldRWLock(w http.ResponseWriter, r *http.Request) error {
	return holdLease[rwHoldRequest](a, w, r, rwLockLocation, a.svc.HoldRW)
}
