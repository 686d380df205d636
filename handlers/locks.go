package handlers

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// lockPrimitive describes the exclusive lock, under /v1/locks/: its
// acquire body adds the keep-alive fields to a hold's, and its leases
// answer as a read/write lock's do (answerLease).
func (a *api) lockPrimitive() *primitive[acquireRequest, holdRequest, locks.AcquireRequest, locks.Lease] {
	return &primitive[acquireRequest, holdRequest, locks.AcquireRequest, locks.Lease]{
		a: a, base: "/v1/locks/", target: anyLease,
		acquire: a.svc.Acquire, hold: a.svc.Hold, answer: answerLease,
		renew:   modeless(a.svc.Renew),
		release: a.releaseLock, force: forced(a.svc.ForceRelease), inspect: a.inspectLock,
		watchKind: "lock", watchState: lockWatchState,
	}
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

// inspectLock is the state of the lock name, with what the lease of token
// (when given) holds. Returns the errors of locks.Service.Inspect, which
// checks the name and the token.
func (a *api) inspectLock(ctx context.Context, name, token string) (any, error) {
	st, err := a.svc.Inspect(ctx, name, token)
	if err != nil {
		return nil, err
	}
	return toLockStateResponse(st, token != ""), nil
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

// releaseLock gives back one hold of token's lease on the lock name.
// Returns the errors of locks.Service.Release.
func (a *api) releaseLock(ctx context.Context, name, token string, _ locks.RWMode) (any, error) {
	rel, err := a.svc.Release(ctx, name, token)
	if err != nil {
		return nil, err
	}
	return releaseResponse{Released: rel.Released, HoldCount: rel.HoldCount}, nil
}
