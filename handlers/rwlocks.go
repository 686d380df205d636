package handlers

import (
	"context"
	"net/http"
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
	Name            string              `json:"name"`
	WriteHeld       bool                `json:"write_held"`
	Readers         int64               `json:"readers"`
	Fence           int64               `json:"fence"`
	Waiters         rwWaitersResponse   `json:"waiters"`
	Fair            bool                `json:"fair"`
	Owned           *bool               `json:"owned,omitempty"`
	Mode            string              `json:"mode,omitempty"`
	Modes           []string            `json:"modes,omitempty"`
	HoldCount       int64               `json:"hold_count,omitempty"`
	TTLMS           int64               `json:"ttl_ms,omitempty"`
	ExpiresAt       *time.Time          `json:"expires_at,omitempty"`
	Keepalive       *keepaliveResponse  `json:"keepalive,omitempty"`
	Owner           string              `json:"owner,omitempty"`
	LostReason      string              `json:"lost_reason,omitempty"`
	Leases          []heldLeaseResponse `json:"leases"`
	LeasesTruncated bool                `json:"leases_truncated"`
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

// modeParam reads the optional ?mode= naming the lease to release or renew:
// absent it is "" (the service's default); given once, it is exactly read
// or write. Returns queryParam's errors, and an invalid-request error
// naming mode for any other value (READ, an empty mode=).
func modeParam(r *http.Request) (locks.RWMode, error) {
	mode, _, err := oneOfParam(r, "mode", string(locks.ModeRead), string(locks.ModeWrite))
	return locks.RWMode(mode), err
}

// rwLockPrimitive describes the read/write lock, under /v1/rwlocks/: its
// bodies add the mode to a lock's, a release or renew acts on the lease
// ?mode= names (both by default), and its leases answer as a lock's do.
func (a *api) rwLockPrimitive() *primitive[rwAcquireRequest, rwHoldRequest, locks.AcquireRequest, locks.Lease] {
	return &primitive[rwAcquireRequest, rwHoldRequest, locks.AcquireRequest, locks.Lease]{
		a: a, base: "/v1/rwlocks/", params: []string{"mode"}, target: modeParam,
		acquire: a.svc.AcquireRW, hold: a.svc.HoldRW, renew: a.svc.RenewRW, answer: answerLease,
		release: a.releaseRWLock, force: forced(a.svc.ForceReleaseRW), inspect: a.inspectRWLock,
		watchKind: "rwlock", watchState: rwWatchState,
	}
}

// inspectRWLock is the state of the read/write lock name, with the leases
// of token (when given). Returns the errors of locks.Service.InspectRW.
func (a *api) inspectRWLock(ctx context.Context, name, token string) (any, error) {
	st, err := a.svc.InspectRW(ctx, name, token)
	if err != nil {
		return nil, err
	}
	return toRWStateResponse(st, token != ""), nil
}

// toRWStateResponse is the body of GET /v1/rwlocks/{name}, and an item of
// GET /v1/rwlocks; withToken says the state was read with a Lock-Token.
func toRWStateResponse(st locks.RWState, withToken bool) rwStateResponse {
	resp := rwStateResponse{Name: st.Name, WriteHeld: st.WriteHeld, Readers: st.Readers, Fence: st.Fence,
		Waiters: rwWaitersResponse{Read: st.WaitingReaders, Write: st.WaitingWriters}, Fair: st.Fair,
		LostReason: st.LostReason, Leases: toHeldLeaseResponses(st.Leases), LeasesTruncated: st.LeasesTruncated}
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

// releaseRWLock gives back one hold of token's lease in mode ("": the
// service's default) on the read/write lock name. Returns the errors of
// locks.Service.ReleaseRW.
func (a *api) releaseRWLock(ctx context.Context, name, token string, mode locks.RWMode) (any, error) {
	rel, err := a.svc.ReleaseRW(ctx, name, token, mode)
	if err != nil {
		return nil, err
	}
	return rwReleaseResponse{Released: rel.Released, HoldCount: rel.HoldCount, Mode: string(rel.Mode)}, nil
}
