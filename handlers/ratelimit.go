package handlers

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// RateLimitConfig tunes the rate-limit routes.
type RateLimitConfig struct {
	// ClientIP says how to find the client's address behind proxies.
	ClientIP ClientIPConfig
	// LegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset to every
	// decision, next to the IETF RateLimit and RateLimit-Policy headers.
	LegacyHeaders bool
	// SelfPolicy names a policy applied per client IP to Latchkey's own /v1
	// API (the gate excepted); empty disables it.
	SelfPolicy string
}

// degradedHeader marks a decision taken without Redis (fail-open).
const degradedHeader = "Latchkey-RateLimit-Degraded"

// checkRequest is the body of POST /v1/ratelimit/check: a policy name, or an
// inline limit (limit, window, algorithm, burst).
type checkRequest struct {
	Policy    string `json:"policy"`
	Key       string `json:"key"`
	Limit     *int64 `json:"limit"`
	Window    string `json:"window" validate:"omitempty,posduration"`
	Algorithm string `json:"algorithm" validate:"omitempty,oneof=fixed_window sliding_window token_bucket"`
	Burst     *int64 `json:"burst"`
	Cost      *int64 `json:"cost"`
}

// decisionResponse is a rate-limit decision, allowed or denied.
type decisionResponse struct {
	Allowed      bool   `json:"allowed"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Policy       string `json:"policy"`
	Key          string `json:"key"`
	Degraded     bool   `json:"degraded,omitempty"`
}

// toServiceRequest turns a check body into a service request. An inline
// limit is any of limit, window, algorithm or burst; limit and window are
// then required.
func (req checkRequest) toServiceRequest() (ratelimit.Request, error) {
	out := ratelimit.Request{Policy: req.Policy, Key: req.Key}
	if req.Cost != nil {
		if *req.Cost < 1 {
			return out, badRequest("cost", "min", "cost must be at least 1, got "+strconv.FormatInt(*req.Cost, 10))
		}
		out.Cost = *req.Cost
	}
	if req.Limit == nil && req.Window == "" && req.Algorithm == "" && req.Burst == nil {
		return out, nil
	}
	if req.Policy != "" {
		return out, badRequest("policy", "excluded", "give either policy or an inline limit (limit, window, algorithm, burst), not both")
	}
	if req.Limit == nil {
		return out, badRequest("limit", "required", "limit is required for an inline limit")
	}
	if req.Window == "" {
		return out, badRequest("window", "required", "window is required for an inline limit (a duration such as 10s)")
	}
	l := ratelimit.Limit{Algorithm: ratelimit.Algorithm(req.Algorithm), Limit: *req.Limit, Window: parseDuration(req.Window)}
	if req.Burst != nil {
		if *req.Burst < 1 {
			return out, badRequest("burst", "min", "burst must be at least 1, got "+strconv.FormatInt(*req.Burst, 10))
		}
		l.Burst = *req.Burst
	}
	out.Inline = &l
	return out, nil
}

// handleCheckRateLimit implements operationId checkRateLimit.
func (a *api) handleCheckRateLimit(w http.ResponseWriter, r *http.Request) {
	var req checkRequest
	if err := a.decodeJSON(w, r, &req); err != nil {
		writeError(w, r, a.log, err)
		return
	}
	sreq, err := req.toServiceRequest()
	if err != nil {
		writeError(w, r, a.log, err)
		return
	}
	if sreq.Inline == nil && sreq.Policy != "" {
		// A policy without an explicit key limits the caller itself.
		if sreq, err = a.policyRequest(r, sreq); err != nil {
			writeError(w, r, a.log, err)
			return
		}
	} else if sreq.Key == "" && sreq.Inline != nil {
		writeError(w, r, a.log, badRequest("key", "required", "key is required with an inline limit"))
		return
	}
	a.decide(w, r, sreq, http.StatusTooManyRequests)
}

// handleGateRateLimit implements the gateway route (operationId
// gateRateLimit and its siblings, one per method): the key comes from the
// request itself as the policy says, there is no body.
func (a *api) handleGateRateLimit(w http.ResponseWriter, r *http.Request) {
	pol, err := a.svc.Policy(chi.URLParam(r, "policy"))
	if err != nil {
		writeError(w, r, a.log, err)
		return
	}
	req, err := a.gateRequest(r, pol)
	if err != nil {
		writeError(w, r, a.log, err)
		return
	}
	d, err := a.svc.Check(r.Context(), req)
	if err != nil {
		writeError(w, r, a.log, err)
		return
	}
	a.writeGateDecision(w, r, pol.DenyStatus, d)
}

// decide makes one decision and answers it: 200 when allowed, denyStatus
// when denied, a problem when no decision could be made.
func (a *api) decide(w http.ResponseWriter, r *http.Request, req ratelimit.Request, denyStatus int) {
	d, err := a.svc.Check(r.Context(), req)
	if err != nil {
		writeError(w, r, a.log, err)
		return
	}
	status := http.StatusOK
	if !d.Allowed {
		status = denyStatus
	}
	a.writeDecision(w, status, d)
}

// identity is the key a policy takes from a request: the client's address
// (see ClientIPConfig) or a header's value.
func (a *api) identity(r *http.Request, pol ratelimit.Policy) (string, error) {
	if h := pol.KeyHeader(); h != "" {
		v := r.Header.Get(h)
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

// writeDecision answers a decision with its headers and JSON body.
func (a *api) writeDecision(w http.ResponseWriter, status int, d ratelimit.Decision) {
	setRateLimitHeaders(w.Header(), d, a.cfg.RateLimit.LegacyHeaders)
	writeDecisionJSON(w, status, decisionResponse{
		Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		ResetMS: ceilMillis(d.ResetAfter), RetryAfterMS: ceilMillis(d.RetryAfter),
		Policy: d.Policy, Key: d.Key, Degraded: d.Degraded,
	})
}

// setRateLimitHeaders writes the IETF draft headers of a decision
// (RateLimit-Policy: "name";q=limit;w=window-seconds and RateLimit:
// "name";r=remaining;t=reset-seconds), Retry-After on a denial (seconds,
// rounded up), the degraded marker on a fail-open answer, and the legacy
// X-RateLimit-* headers when asked to. Every gateway request answers the
// first two, so they are built in one buffer and go in under their
// canonical names.
func setRateLimitHeaders(h http.Header, d ratelimit.Decision, legacy bool) {
	reset := ceilSeconds(d.ResetAfter)
	var buf [160]byte
	b := strconv.AppendQuote(buf[:0], d.Policy)
	name := len(b)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, ";w="...)
	b = strconv.AppendInt(b, ceilSeconds(d.Window), 10)
	policyEnd := len(b)
	b = append(b, b[:name]...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	// One string holds both values, one after the other.
	all := string(b)
	vals := []string{all[:policyEnd], all[policyEnd:]}
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
	if !d.Allowed {
		h.Set("Retry-After", retryAfterSeconds(d.RetryAfter))
	}
	if d.Degraded {
		h.Set(degradedHeader, "store-unavailable")
	}
	if d.WouldDeny {
		h[shadowHeader] = wouldDeny
	}
	if legacy {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
	}
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// selfProtect applies the self-protection policy, per client IP, to the /v1
// API except the gate (whose callers are gateways asking on behalf of many
// clients). A denied caller gets 429 rate-limited with the policy's headers.
func (a *api) selfProtect(next http.Handler) http.Handler {
	policy := a.cfg.RateLimit.SelfPolicy
	if policy == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, "/v1/ratelimit/gate/") {
			next.ServeHTTP(w, r)
			return
		}
		key, err := a.cfg.RateLimit.ClientIP.ClientKey(r)
		if err != nil {
			writeError(w, r, a.log, badRequest("client", "address", err.Error()))
			return
		}
		d, err := a.svc.Check(r.Context(), ratelimit.Request{Policy: policy, Key: "api:" + key})
		if err != nil {
			writeError(w, r, a.log, err)
			return
		}
		if d.WouldDeny {
			w.Header()[shadowHeader] = wouldDeny
		}
		if !d.Allowed {
			setRateLimitHeaders(w.Header(), d, a.cfg.RateLimit.LegacyHeaders)
			writeError(w, r, a.log, &httpError{status: http.StatusTooManyRequests, typ: "rate-limited",
				detail: "too many requests from this client; retry after " + retryAfterSeconds(d.RetryAfter) + "s"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// gatePolicy returns the policy named by a gate path
// (/v1/ratelimit/gate/{policy}[/anything]).
func gatePolicy(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/v1/ratelimit/gate/")
	policy, _, _ := strings.Cut(rest, "/")
	return policy, ok && policy != ""
}

// gatePattern is the gate route that matches path (a gate path, see
// gatePolicy) for any method.
func gatePattern(path string) string {
	rest, _ := strings.CutPrefix(path, "/v1/ratelimit/gate/")
	if strings.Contains(rest, "/") {
		return "/v1/ratelimit/gate/{policy}/*"
	}
	return "/v1/ratelimit/gate/{policy}"
}

// gateMethods are the methods the gate has routes for (the spec lists
// them); any other method gets the same answer (see NewRouter).
var gateMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions}
