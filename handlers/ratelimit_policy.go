package handlers

import (
	"net/http"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// shadowHeader marks the answer of a shadow policy that would have denied
// the request (canonical form, set directly on the header map).
const shadowHeader = "Latchkey-Ratelimit-Shadow"

// wouldDeny is the shadow header's one value.
var wouldDeny = []string{"would-deny"}

// gateRequest is the decision the gate asks for under pol: the key and the
// cost come from the request as the policy says, and the decision is taken
// under pol itself, so a reload in between cannot mix two policy sets.
func (a *api) gateRequest(r *http.Request, pol ratelimit.Policy) (ratelimit.Request, error) {
	key, err := a.identity(r, pol)
	if err != nil {
		return ratelimit.Request{}, err
	}
	cost, err := pol.HeaderCost(r.Header.Values(pol.Cost.Header))
	if err != nil {
		return ratelimit.Request{}, err
	}
	return ratelimit.Request{Policy: pol.Name, Using: pol, Key: key, Cost: cost}, nil
}

// policyRequest completes a check request naming a policy: looked up once,
// it gives the key when the body has none (the caller itself) and the cost
// when the body has none and the policy takes it from a header.
func (a *api) policyRequest(r *http.Request, req ratelimit.Request) (ratelimit.Request, error) {
	pol, err := a.svc.Policy(req.Policy)
	if err != nil {
		return req, err
	}
	if req.Key == "" {
		if req.Key, err = a.identity(r, pol); err != nil {
			return req, err
		}
	}
	if req.Cost == 0 {
		if req.Cost, err = pol.HeaderCost(r.Header.Values(pol.Cost.Header)); err != nil {
			return req, err
		}
	}
	req.Using = pol
	return req, nil
}

// policiesResponse is the body of GET /v1/ratelimit/policies.
type policiesResponse struct {
	Version  string           `json:"version"`
	LoadedAt time.Time        `json:"loaded_at"`
	Policies []policyResponse `json:"policies"`
}

// policyResponse is one policy as the policy file spells it.
type policyResponse struct {
	Name       string        `json:"name"`
	Limit      int64         `json:"limit"`
	Window     string        `json:"window"`
	Algorithm  string        `json:"algorithm"`
	Burst      int64         `json:"burst,omitempty"`
	Key        string        `json:"key"`
	DenyStatus int           `json:"deny_status"`
	Fail       string        `json:"fail"`
	Shadow     bool          `json:"shadow"`
	Cost       *costResponse `json:"cost,omitempty"`
}

type costResponse struct {
	Header  string `json:"header"`
	Max     int64  `json:"max"`
	Default int64  `json:"default"`
}

// handleListPolicies implements operationId listRateLimitPolicies: the
// active policy set and its version. It returns no error.
func (a *api) handleListPolicies(w http.ResponseWriter, r *http.Request) error {
	set := a.svc.ActivePolicies()
	out := policiesResponse{Version: set.Version, LoadedAt: set.LoadedAt.UTC().Truncate(time.Millisecond),
		Policies: make([]policyResponse, len(set.Policies))}
	for i, p := range set.Policies {
		out.Policies[i] = policyResponse{Name: p.Name, Limit: p.Limit.Limit, Window: p.Window.String(),
			Algorithm: string(p.Algorithm), Burst: p.Burst, Key: p.Key, DenyStatus: p.DenyStatus,
			Fail: string(p.Fail), Shadow: p.Shadow}
		if p.Cost.Header != "" {
			out.Policies[i].Cost = &costResponse{Header: p.Cost.Header, Max: p.Cost.Max, Default: p.Cost.Default}
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
