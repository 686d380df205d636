package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// electionHoldRequest is the body of POST /v1/elections/{name}/hold; every
// field is optional. A campaign is always fair, so it has no fair field.
type electionHoldRequest struct {
	Value string  `json:"value"` // checked by the service (locks.ValidateValue)
	TTL   *string `json:"ttl" validate:"omitempty,posduration"`
	Wait  *string `json:"wait" validate:"omitempty,duration"`
	Owner string  `json:"owner"` // checked by the service (locks.ValidateOwner)
}

func (req electionHoldRequest) wait() time.Duration { return parseDuration(req.Wait) }

// serviceRequest is req as the service takes it, under token.
func (req electionHoldRequest) serviceRequest(token string) locks.AcquireRequest {
	return locks.AcquireRequest{Token: token, TTL: parseDuration(req.TTL), Wait: req.wait(), Owner: req.Owner, Value: req.Value}
}

// campaignRequest is the body of POST /v1/elections/{name}: a hold's body
// and the keep-alive fields of a lock's acquire.
type campaignRequest struct {
	electionHoldRequest
	keepaliveFields
}

// serviceRequest is req as the service takes it, under token.
func (req campaignRequest) serviceRequest(token string) locks.AcquireRequest {
	return req.keepaliveFields.apply(req.electionHoldRequest.serviceRequest(token))
}

// proclaimRequest is the body of PUT /v1/elections/{name}/value.
type proclaimRequest struct {
	Value *string `json:"value" validate:"required"` // its size is checked by the service
}

// electionLeaseResponse is a granted, renewed or proclaimed leadership.
type electionLeaseResponse struct {
	Name      string             `json:"name"`
	Token     string             `json:"token,omitempty"`
	Term      int64              `json:"term"`
	Fence     int64              `json:"fence"` // the term, under the name every lease has
	Value     *string            `json:"value,omitempty"`
	Owner     string             `json:"owner,omitempty"`
	TTLMS     int64              `json:"ttl_ms"`
	ExpiresAt time.Time          `json:"expires_at"`
	Reentrant bool               `json:"reentrant"`
	Keepalive *keepaliveResponse `json:"keepalive,omitempty"`
	WaitedMS  int64              `json:"waited_ms,omitempty"`
}

// toElectionLeaseResponse is l as the API answers it; withValue says l
// carries the leader's value (a renewal does not read it).
func toElectionLeaseResponse(l locks.Lease, withToken, withValue bool) electionLeaseResponse {
	resp := electionLeaseResponse{Name: l.Name, Term: l.Fence, Fence: l.Fence, Owner: l.Owner,
		TTLMS: l.TTL.Milliseconds(), ExpiresAt: l.ExpiresAt, Reentrant: l.Reentrant,
		Keepalive: toKeepaliveResponse(l.Keepalive), WaitedMS: l.Waited.Milliseconds()}
	if withToken {
		resp.Token = l.Token
	}
	if withValue {
		resp.Value = &l.Value
	}
	return resp
}

// answerElectionLease answers a leadership: granted, with its Lock-Token
// (201 elected, 200 re-entered), or renewed (200, no token).
func answerElectionLease(w http.ResponseWriter, l locks.Lease, granted bool) {
	status := http.StatusOK
	if granted {
		w.Header().Set("Lock-Token", l.Token)
		if !l.Reentrant {
			status = http.StatusCreated
		}
	}
	writeElectionLeaseJSON(w, status, toElectionLeaseResponse(l, granted, granted))
}

// electionLeaseEvent is the data of an election hold stream's "acquired"
// (withToken) and "renewed" events.
func electionLeaseEvent(l locks.Lease, withToken bool) any {
	return toElectionLeaseResponse(l, withToken, withToken)
}

// leaderResponse is an election's leader as anyone may see it: never its token.
type leaderResponse struct {
	Value     string    `json:"value"`
	Term      int64     `json:"term"`
	Owner     string    `json:"owner,omitempty"`
	Since     time.Time `json:"since"`
	TTLMS     int64     `json:"ttl_ms"`
	ExpiresAt time.Time `json:"expires_at"`
}

func toLeaderResponse(l *locks.Leader) *leaderResponse {
	if l == nil {
		return nil
	}
	return &leaderResponse{Value: l.Value, Term: l.Term, Owner: l.Owner, Since: l.Since,
		TTLMS: l.TTL.Milliseconds(), ExpiresAt: l.ExpiresAt}
}

// electionStateResponse is the answer to GET /v1/elections/{name}, and an
// item of GET /v1/elections. It never holds a token.
type electionStateResponse struct {
	Name       string             `json:"name"`
	Leader     *leaderResponse    `json:"leader"` // null when vacant
	Term       int64              `json:"term"`
	Candidates int64              `json:"candidates"`
	Owned      *bool              `json:"owned,omitempty"`
	Keepalive  *keepaliveResponse `json:"keepalive,omitempty"`
	LostReason string             `json:"lost_reason,omitempty"`
}

func toElectionStateResponse(st locks.ElectionState, withToken bool) electionStateResponse {
	resp := electionStateResponse{Name: st.Name, Leader: toLeaderResponse(st.Leader), Term: st.Term,
		Candidates: st.Candidates, Keepalive: toKeepaliveResponse(st.Keepalive), LostReason: st.LostReason}
	if withToken {
		resp.Owned = &st.Owned
	}
	return resp
}

// resignResponse is the answer to DELETE /v1/elections/{name}.
type resignResponse struct {
	Released bool `json:"released"`
}

// electionPrimitive describes the election, under /v1/elections/: its
// bodies carry the leader's value and no fair field, its leases answer
// with the term and the value, and a resignation is a release.
func (a *api) electionPrimitive() *primitive[campaignRequest, electionHoldRequest, locks.AcquireRequest, locks.Lease] {
	return &primitive[campaignRequest, electionHoldRequest, locks.AcquireRequest, locks.Lease]{
		a: a, base: "/v1/elections/", target: anyLease,
		acquire: a.svc.Campaign, hold: a.svc.HoldElection, answer: answerElectionLease, holdEvent: electionLeaseEvent,
		renew:   modeless(a.svc.RenewElection),
		release: a.resign, force: forced(a.svc.ForceResign), inspect: a.inspectElection,
		watchKind: "election", watchState: electionWatchState, watchEvent: toWatchElectionEvent,
	}
}

// inspectElection is the state of the election name. Returns the errors
// of locks.Service.InspectElection.
func (a *api) inspectElection(ctx context.Context, name, token string) (any, error) {
	st, err := a.svc.InspectElection(ctx, name, token)
	if err != nil {
		return nil, err
	}
	return toElectionStateResponse(st, token != ""), nil
}

// resign gives up token's leadership of the election name. Returns the
// errors of locks.Service.Resign.
func (a *api) resign(ctx context.Context, name, token string, _ locks.RWMode) (any, error) {
	rel, err := a.svc.Resign(ctx, name, token)
	if err != nil {
		return nil, err
	}
	return resignResponse{Released: rel.Released}, nil
}

// handleProclaim implements operationId proclaimElection: the leader the
// Lock-Token names sets its value, keeping its term. Returns the errors of
// reading the request and of locks.Service.Proclaim.
func (a *api) handleProclaim(w http.ResponseWriter, r *http.Request) error {
	var body proclaimRequest
	token, err := a.decodeLease(w, r, &body)
	if err != nil {
		return err
	}
	if token == "" {
		return errTokenRequired
	}
	l, err := a.svc.Proclaim(r.Context(), lockName(r), token, *body.Value)
	if err != nil {
		return err
	}
	writeElectionLeaseJSON(w, http.StatusOK, toElectionLeaseResponse(l, false, true))
	return nil
}

// handleListElections implements operationId listElections. Returns the
// errors of reading the query and of locks.Service.ListElections.
func (a *api) handleListElections(w http.ResponseWriter, r *http.Request) error {
	return list(w, r, a.svc.ListElections, func(st locks.ElectionState) (string, electionStateResponse) {
		return st.Name, toElectionStateResponse(st, false)
	})
}
