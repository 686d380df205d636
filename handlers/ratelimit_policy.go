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

// requestSource is an HTTP request as the rate-limit domain reads it to
// find a decision's key and cost (ratelimit.Source): the client's address
// behind the trusted proxies (see ClientIPConfig) and the request's
// headers. What each key source of a policy means is the domain's.
type requestSource struct {
	r  *http.Request
	ip *ClientIPConfig
}

// source is r as a ratelimit.Source, outside the gate: it has no gate path.
func (a *api) source(r *http.Request) requestSource {
	return requestSource{r: r, ip: &a.cfg.RateLimit.ClientIP}
}

// ClientKey is the key of the client's address (ClientIPConfig.ClientKey).
func (s requestSource) ClientKey() (string, error) { return s.ip.ClientKey(s.r) }

// Header returns the values the request sent for the header name.
func (s requestSource) Header(name string) []string { return s.r.Header.Values(name) }

// GatePath reports that the request is not one to the gate.
func (requestSource) GatePath() (string, bool) { return "", false }

// gateSource is a request to the gate as a ratelimit.Source, whose path,
// /v1/ratelimit/gate/{policy}/KEY, may give a key.
type gateSource struct{ requestSource }

// GatePath returns what follows /v1/ratelimit/gate/{policy}/ in the
// request's path, "" when nothing does.
func (s gateSource) GatePath() (string, bool) {
	rest, ok := strings.CutPrefix(s.r.URL.Path, "/v1/ratelimit/gate/")
	if ok {
		rest, ok = strings.CutPrefix(rest, chi.URLParam(s.r, "policy"))
	}
	if ok {
		rest, ok = strings.CutPrefix(rest, "/")
	}
	if !ok {
		return "", true
	}
	return rest, true
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
