package client

import (
	"context"
	"net/http"
	"net/url"
	"slices"
)

// kind is the kind of resource a lease is held on.
type kind int

const (
	kindLock kind = iota
	kindRW
	kindSemaphore
	kindElection
)

// target is what a lease is taken on: a lock, one mode of a read/write
// lock, permits of a semaphore, or an election's leadership. The lease code
// (acquire, hold, renew, release, settle) is the same for all four; the
// target gives it its
// routes and the fields its acquire body adds.
type target struct {
	kind    kind
	name    string
	mode    string // kindRW: "read" or "write"
	permits int64  // kindSemaphore: the capacity
	count   int64  // kindSemaphore: the permits the lease takes
	value   string // kindElection: the leader's value
}

func lockTarget(name string) target { return target{kind: kindLock, name: name} }

// path is the target's route, escaped.
func (t target) path() string {
	switch t.kind {
	case kindRW:
		return "/v1/rwlocks/" + url.PathEscape(t.name)
	case kindSemaphore:
		return "/v1/semaphores/" + url.PathEscape(t.name)
	case kindElection:
		return "/v1/elections/" + url.PathEscape(t.name)
	}
	return lockPath(t.name)
}

// query names the lease meant by a release or renewal: a read/write lock's
// token may hold both modes during a downgrade.
func (t target) query() url.Values {
	if t.kind == kindRW {
		return url.Values{"mode": {t.mode}}
	}
	return nil
}

// fill adds the target's fields to an acquire or hold body.
func (t target) fill(b *acquireBody) {
	b.Mode = t.mode
	b.Permits = t.permits
	b.Count = t.count
	b.Value = t.value
}

// ownership is what the server tells a token about its lease of a target.
type ownership struct {
	Owned      bool     `json:"owned"`
	Mode       string   `json:"mode"`
	Modes      []string `json:"modes"`
	LostReason string   `json:"lost_reason"`
}

// holds says whether the token holds the target's lease: for a read/write
// lock, the lease of the target's mode.
func (o ownership) holds(t target) bool {
	if !o.Owned {
		return false
	}
	if t.kind != kindRW {
		return true
	}
	return o.Mode == t.mode || slices.Contains(o.Modes, t.mode)
}

// owned asks the server about token's lease of t.
func (c *Client) owned(ctx context.Context, t target, token string) (ownership, error) {
	req := request{method: http.MethodGet, path: t.path(), token: token}
	resp, err := c.do(ctx, req, true)
	if err != nil {
		return ownership{}, err
	}
	var o ownership
	if err := decode(req, resp, &o); err != nil {
		return ownership{}, err
	}
	return o, nil
}
