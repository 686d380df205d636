package handlers

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// listParams are the query parameters of a listing.
var listParams = []string{"cursor", "limit", "prefix"}

// listResponse is the answer to GET /v1/locks, /v1/rwlocks, /v1/semaphores
// and /v1/elections: a page of items, each as GET on its name answers it, and
// the cursor of the next page, absent on the last.
type listResponse[R any] struct {
	Items      []R    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// handleListLocks implements operationId listLocks. Returns the errors of
// reading the query and of locks.Service.ListLocks.
func (a *api) handleListLocks(w http.ResponseWriter, r *http.Request) error {
	return list(w, r, a.svc.ListLocks, func(st locks.LockState) (string, lockStateResponse) {
		return st.Name, toLockStateResponse(st, false)
	})
}

// handleListRWLocks implements operationId listRWLocks. Returns the errors
// of reading the query and of locks.Service.ListRWLocks.
func (a *api) handleListRWLocks(w http.ResponseWriter, r *http.Request) error {
	return list(w, r, a.svc.ListRWLocks, func(st locks.RWState) (string, rwStateResponse) {
		return st.Name, toRWStateResponse(st, false)
	})
}

// handleListSemaphores implements operationId listSemaphores. Returns the
// errors of reading the query and of locks.Service.ListSemaphores.
func (a *api) handleListSemaphores(w http.ResponseWriter, r *http.Request) error {
	return list(w, r, a.svc.ListSemaphores, func(st locks.SemaphoreState) (string, semaphoreStateResponse) {
		return st.Name, toSemaphoreStateResponse(st, false)
	})
}

// lostKinds are the listings of lost leases: /v1/lost/<path> lists the
// primitive the lock service calls label.
var lostKinds = []struct{ path, label string }{{"locks", "lock"}, {"rwlocks", "rwlock"}, {"semaphores", "semaphore"},
	{"elections", "election"}}

// lostStateResponse is one name of a listing of lost leases: the leases it
// lost that are still remembered, newest first, never a token.
type lostStateResponse struct {
	Name            string              `json:"name"`
	Leases          []lostLeaseResponse `json:"leases"`
	LeasesTruncated bool                `json:"leases_truncated"`
}

// lostLeaseResponse is one lost lease.
type lostLeaseResponse struct {
	Reason string    `json:"reason"`
	LostAt time.Time `json:"lost_at"`
	Fence  int64     `json:"fence,omitempty"`
	Owner  string    `json:"owner,omitempty"`
}

// handleListLost implements operationIds listLostLocks, listLostRWLocks,
// listLostSemaphores and listLostElections: the names of the primitive label that lost a lease
// recently. Returns the errors of reading the query and of
// locks.Service.ListLost.
func (a *api) handleListLost(label string) func(http.ResponseWriter, *http.Request) error {
	page := func(ctx context.Context, req locks.ListRequest) (locks.Page[locks.LostState], error) {
		return a.svc.ListLost(ctx, label, req)
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		return list(w, r, page, func(st locks.LostState) (string, lostStateResponse) {
			resp := lostStateResponse{Name: st.Name, Leases: make([]lostLeaseResponse, 0, len(st.Leases)), LeasesTruncated: st.Truncated}
			for _, l := range st.Leases {
				resp.Leases = append(resp.Leases, lostLeaseResponse{Reason: l.Reason, LostAt: l.LostAt, Fence: l.Fence, Owner: l.Owner})
			}
			return st.Name, resp
		})
	}
}

// list answers a page of one primitive's listing: the service's page, each
// item as item makes it, less the names the request's API key may not use
// (a key limited to some names sees only those; its page may then hold
// fewer items). Returns the errors of listRequest and of the service's list.
func list[S, R any](w http.ResponseWriter, r *http.Request,
	page func(context.Context, locks.ListRequest) (locks.Page[S], error), item func(S) (string, R)) error {
	req, err := listRequest(r)
	if err != nil {
		return err
	}
	p, err := page(r.Context(), req)
	if err != nil {
		return err
	}
	key := keyOf(r.Context())
	resp := listResponse[R]{Items: make([]R, 0, len(p.Items)), NextCursor: p.NextCursor}
	for _, st := range p.Items {
		name, it := item(st)
		if key == nil || key.MayName(name) {
			resp.Items = append(resp.Items, it)
		}
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// listRequest reads a listing's query: prefix and cursor as given (empty
// as absent: every name, the first page), limit a whole number from 1.
// The service checks the prefix, the cursor and the limit's maximum.
// Returns queryParam's errors, and an invalid-request error naming limit
// when it is not a whole number of at least 1.
func listRequest(r *http.Request) (locks.ListRequest, error) {
	var req locks.ListRequest
	var err error
	if req.Prefix, _, err = queryParam(r, "prefix"); err != nil {
		return req, err
	}
	if req.Cursor, _, err = queryParam(r, "cursor"); err != nil {
		return req, err
	}
	limit, ok, err := queryParam(r, "limit")
	if err != nil || !ok {
		return req, err
	}
	if limit == "" || !isDigits(limit) {
		return req, badRequest("limit", "format",
			"limit must be a whole number from 1 to "+strconv.Itoa(locks.MaxListLimit)+", got "+store.Quote(limit))
	}
	n, err := strconv.Atoi(limit)
	switch {
	case err != nil: // digits too many to parse: too large
		n = locks.MaxListLimit + 1
	case n < 1:
		return req, badRequest("limit", "min", "limit must be at least 1, got "+store.Clip(limit))
	}
	req.Limit = n
	return req, nil
}

// isDigits reports whether s is ASCII digits only.
func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// heldLeaseResponse is one lease of a read/write lock or a semaphore in its
// state: who holds it, since when and for how long, never its token.
type heldLeaseResponse struct {
	Owner     string    `json:"owner,omitempty"`
	GrantedAt time.Time `json:"granted_at"`
	TTLMS     int64     `json:"ttl_ms"`
	ExpiresAt time.Time `json:"expires_at"`
	Mode      string    `json:"mode,omitempty"`
	Count     int64     `json:"count,omitempty"`
}

// toHeldLeaseResponses is the leases member of a state: always an array.
func toHeldLeaseResponses(ls []locks.HeldLease) []heldLeaseResponse {
	out := make([]heldLeaseResponse, 0, len(ls))
	for _, l := range ls {
		out = append(out, heldLeaseResponse{Owner: l.Owner, GrantedAt: l.GrantedAt, TTLMS: l.TTL.Milliseconds(),
			ExpiresAt: l.ExpiresAt, Mode: string(l.Mode), Count: l.Count})
	}
	return out
}
