package handlers

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
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
	var key string
	var keys []string
	var err error
	if pol.Multi() {
		keys, err = a.limitKeys(r, pol, true)
	} else {
		key, err = a.identity(r, pol)
	}
	if err != nil {
		return ratelimit.Request{}, err
	}
	cost, err := headerCost(r, pol)
	if err != nil {
		return ratelimit.Request{}, err
	}
	return ratelimit.Request{Policy: pol.Name, Using: pol, Key: key, Keys: keys, Cost: cost}, nil
}

// headerCost is the cost a request sends in pol's cost header (see
// ratelimit.Policy.HeaderCost), 0 when pol takes no cost from a header.
// Returns an invalid-request error naming the header when it is sent more
// than once, as for every header (singleHeader), or when its value is not a
// cost pol accepts.
func headerCost(r *http.Request, pol ratelimit.Policy) (int64, error) {
	if pol.Cost.Header == "" {
		return 0, nil
	}
	if _, err := singleHeader(r, pol.Cost.Header); err != nil {
		return 0, err
	}
	return pol.HeaderCost(r.Header.Values(pol.Cost.Header))
}

// limitKeys are the keys of a multi-limit policy's limits, taken from the
// request as each limit says: the client's address (found once), a
// header's value, the constant key, or the gate path's remainder after
// /v1/ratelimit/gate/{policy}/ (gate requests only).
func (a *api) limitKeys(r *http.Request, pol ratelimit.Policy, gate bool) ([]string, error) {
	keys := make([]string, len(pol.Limits))
	var ip string
	for i, l := range pol.Limits {
		switch l.Key {
		case ratelimit.KeyConst:
			keys[i] = ratelimit.ConstKey
		case ratelimit.KeyIP:
			if ip == "" {
				k, err := a.cfg.RateLimit.ClientIP.ClientKey(r)
				if err != nil {
					return nil, badRequest("client", "address", err.Error())
				}
				ip = k
			}
			keys[i] = ip
		case ratelimit.KeyPath:
			prefix := "/v1/ratelimit/gate/" + pol.Name + "/"
			rest, ok := strings.CutPrefix(r.URL.Path, prefix)
			if !gate {
				return nil, badRequest("key", "required", "limit "+l.Name+" of policy "+pol.Name+
					" takes its key from the gate path (/v1/ratelimit/gate/"+pol.Name+"/KEY): give key in the body")
			}
			if !ok || rest == "" {
				return nil, badRequest("path", "required", "limit "+l.Name+" of policy "+pol.Name+
					" takes its key from the path after "+prefix+", which is missing")
			}
			if err := ratelimit.ValidateRateLimitKey("path", rest); err != nil {
				return nil, err
			}
			keys[i] = rest
		default:
			h := l.KeyHeader()
			v, err := singleHeader(r, h)
			if err != nil {
				return nil, err
			}
			if v == "" {
				return nil, badRequest(h, "required", "limit "+l.Name+" of policy "+pol.Name+" takes its key from the "+h+" header, which is missing")
			}
			if err := ratelimit.ValidateRateLimitKey(h, v); err != nil {
				return nil, err
			}
			keys[i] = v
		}
	}
	return keys, nil
}

// identity is the key a policy takes from a request: the client's address
// (see ClientIPConfig) or a header's value.
func (a *api) identity(r *http.Request, pol ratelimit.Policy) (string, error) {
	if h := pol.KeyHeader(); h != "" {
		v, err := singleHeader(r, h)
		if err != nil {
			return "", err
		}
		if v == "" {
			return "", badRequest(h, "required", "policy "+pol.Name+" takes its key from the "+h+" header, which is missing")
		}
		if err := ratelimit.ValidateRateLimitKey(h, v); err != nil {
			return "", err
		}
		return v, nil
	}
	key, err := a.cfg.RateLimit.ClientIP.ClientKey(r)
	if err != nil {
		return "", badRequest("client", "address", err.Error())
	}
	return key, nil
}

// policyRequest completes a check request naming a policy: looked up once,
// it gives the key when the body has none (the caller itself) and the cost
// when the body has none and the policy takes it from a header.
func (a *api) policyRequest(r *http.Request, req ratelimit.Request) (ratelimit.Request, error) {
	pol, err := a.svc.Policy(req.Policy)
	if err != nil {
		return req, err
	}
	switch {
	case req.Key != "":
		// A key in the body is every limit's but a "const" one's.
	case pol.Multi():
		if req.Keys, err = a.limitKeys(r, pol, false); err != nil {
			return req, err
		}
	default:
		if req.Key, err = a.identity(r, pol); err != nil {
			return req, err
		}
	}
	if req.Cost == 0 {
		if req.Cost, err = headerCost(r, pol); err != nil {
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
	Name   string `json:"name"`
	Limit  int64  `json:"limit,omitempty"`
	Window string `json:"window,omitempty"`
	calendarResponse
	Algorithm  string        `json:"algorithm,omitempty"`
	Burst      int64         `json:"burst,omitempty"`
	Lease      int64         `json:"lease,omitempty"`
	Key        string        `json:"key,omitempty"`
	DenyStatus int           `json:"deny_status"`
	Fail       string        `json:"fail"`
	Shadow     bool          `json:"shadow"`
	Cost       *costResponse `json:"cost,omitempty"`
	// Stats are this instance's counts of the policy's decisions for the
	// tenant asking.
	Stats policyStatsResponse `json:"stats"`
	// Limits are a multi-limit policy's limits; limit, window, algorithm
	// and key are then absent.
	Limits []limitResponse `json:"limits,omitempty"`
}

// limitResponse is one limit of a multi-limit policy.
type limitResponse struct {
	Name   string `json:"name"`
	Key    string `json:"key"`
	Limit  int64  `json:"limit"`
	Window string `json:"window,omitempty"`
	calendarResponse
	Algorithm string `json:"algorithm"`
	Burst     int64  `json:"burst,omitempty"`
	Lease     int64  `json:"lease,omitempty"`
	Shadow    bool   `json:"shadow,omitempty"`
}

// calendarResponse is a calendar window's fields, absent for another.
type calendarResponse struct {
	Calendar  string `json:"calendar,omitempty"`
	Timezone  string `json:"timezone,omitempty"`
	WeekStart string `json:"week_start,omitempty"`
}

// toCalendarResponse is l's window as a policy file spells it: a duration,
// or a calendar period.
func toCalendarResponse(l ratelimit.Limit) (string, calendarResponse) {
	if l.Calendar == nil {
		return l.Window.String(), calendarResponse{}
	}
	return "", calendarResponse{Calendar: l.Calendar.Period, Timezone: l.Calendar.Timezone, WeekStart: l.Calendar.WeekStart}
}

type costResponse struct {
	Header  string `json:"header"`
	Max     int64  `json:"max"`
	Default int64  `json:"default"`
}

// handleListPolicies implements operationId listRateLimitPolicies: the
// active policy set and its version, each policy with this instance's
// counts of its decisions for the tenant asking. It returns no error.
func (a *api) handleListPolicies(w http.ResponseWriter, r *http.Request) error {
	set := a.svc.ActivePolicies()
	stats := a.svc.PolicyStats(r.Context())
	out := policiesResponse{Version: set.Version, LoadedAt: set.LoadedAt.UTC().Truncate(time.Millisecond),
		Policies: make([]policyResponse, len(set.Policies))}
	for i, p := range set.Policies {
		out.Policies[i] = policyResponse{Name: p.Name, DenyStatus: p.DenyStatus, Fail: string(p.Fail), Shadow: p.Shadow,
			Stats: newPolicyStatsResponse(stats[p.Name])}
		if p.Multi() {
			for _, l := range p.Limits {
				lr := limitResponse{Name: l.Name, Key: l.Key, Limit: l.Limit.Limit, Algorithm: string(l.Algorithm), Burst: l.Burst,
					Lease: l.Lease, Shadow: l.Shadow}
				lr.Window, lr.calendarResponse = toCalendarResponse(l.Limit)
				out.Policies[i].Limits = append(out.Policies[i].Limits, lr)
			}
		} else {
			pr := &out.Policies[i]
			pr.Limit, pr.Algorithm, pr.Burst, pr.Key = p.Limit.Limit, string(p.Algorithm), p.Burst, p.Key
			pr.Window, pr.calendarResponse = toCalendarResponse(p.Limit)
			pr.Lease = p.Lease
		}
		if p.Cost.Header != "" {
			out.Policies[i].Cost = &costResponse{Header: p.Cost.Header, Max: p.Cost.Max, Default: p.Cost.Default}
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// policyStatsResponse is a policy's stats member.
type policyStatsResponse struct {
	SinceStart countsResponse `json:"since_start"`
	LastMinute countsResponse `json:"last_minute"`
}

type countsResponse struct {
	Allowed   int64 `json:"allowed"`
	Denied    int64 `json:"denied"`
	WouldDeny int64 `json:"would_deny"`
}

func newPolicyStatsResponse(s ratelimit.PolicyStats) policyStatsResponse {
	counts := func(c ratelimit.Counts) countsResponse {
		return countsResponse{Allowed: c.Allowed, Denied: c.Denied, WouldDeny: c.WouldDeny}
	}
	return policyStatsResponse{SinceStart: counts(s.SinceStart), LastMinute: counts(s.LastMinute)}
}

// topKeysResponse is the body of GET /v1/ratelimit/policies/{policy}/top.
type topKeysResponse struct {
	Policy        string             `json:"policy"`
	WindowSeconds int64              `json:"window_seconds"`
	Approximate   bool               `json:"approximate"`
	Items         []keyCountResponse `json:"items"`
}

type keyCountResponse struct {
	Key    string `json:"key"`
	Denied int64  `json:"denied"`
}

// handleListTopDeniedKeys implements operationId listTopDeniedKeys: the
// keys of a policy this instance denied most in the last minutes for the
// tenant asking, at most ?limit= of them (default
// ratelimit.DefaultTopKeys). Returns an invalid-request error naming
// limit when it is not an integer within 1..ratelimit.MaxTopKeys, and
// TopDenied's errors (policy-not-found for an unknown policy).
func (a *api) handleListTopDeniedKeys(w http.ResponseWriter, r *http.Request) error {
	n := ratelimit.DefaultTopKeys
	v, ok, err := queryParam(r, "limit")
	if err != nil {
		return err
	}
	if ok {
		if n, err = strconv.Atoi(v); err != nil {
			return badRequest("limit", "format", "limit must be a whole number within 1.."+
				strconv.Itoa(ratelimit.MaxTopKeys)+", got "+store.Quote(v))
		}
	}
	top, err := a.svc.TopDenied(r.Context(), chi.URLParam(r, "policy"), n)
	if err != nil {
		return err
	}
	out := topKeysResponse{Policy: top.Policy, WindowSeconds: int64(top.Window / time.Second), Approximate: true,
		Items: make([]keyCountResponse, len(top.Items))}
	for i, kc := range top.Items {
		out.Items[i] = keyCountResponse{Key: kc.Key, Denied: kc.Denied}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
