package handlers

import (
	"net/http"
	"strconv"

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
	// AnonymousPolicy names a policy applied as SelfPolicy is, but only to
	// anonymous callers (the API is open: no key set is active) whose
	// address is not loopback, and only when SelfPolicy is empty. It bounds
	// how fast one such client can make Latchkey keep state in Redis (lock
	// names, inline rate-limit counters). Empty disables it.
	AnonymousPolicy string
}

// degradedHeader marks a decision taken without Redis (fail-open).
const degradedHeader = "Latchkey-RateLimit-Degraded"

// checkRequest is the body of POST /v1/ratelimit/check: a policy name, or an
// inline limit (limit, window, algorithm, burst). A window or algorithm
// that is absent or null is not given; "" is a 400. peek asks for the
// decision without counting; a negative cost gives units back.
type checkRequest struct {
	Policy    string  `json:"policy"`
	Key       string  `json:"key"`
	Limit     *int64  `json:"limit"`
	Window    *string `json:"window" validate:"omitempty,posduration"`
	Algorithm *string `json:"algorithm" validate:"omitempty,oneof=fixed_window sliding_window token_bucket"`
	Burst     *int64  `json:"burst"`
	Cost      *int64  `json:"cost"`
	Peek      bool    `json:"peek"`
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
	// Binding names the limit of a multi-limit policy the other fields
	// describe; absent for a single-limit policy.
	Binding  string `json:"binding,omitempty"`
	Degraded bool   `json:"degraded,omitempty"`
}

// toServiceRequest turns a check body into a service request. An inline
// limit is any of limit, window, algorithm or burst; limit and window are
// then required.
func (req checkRequest) toServiceRequest() (ratelimit.Request, error) {
	out := ratelimit.Request{Policy: req.Policy, Key: req.Key, Peek: req.Peek}
	if req.Cost != nil {
		if *req.Cost == 0 {
			return out, badRequest("cost", "min", "cost must be at least 1, or negative to give units back, got 0")
		}
		out.Cost = *req.Cost
	}
	if req.Limit == nil && req.Window == nil && req.Algorithm == nil && req.Burst == nil {
		return out, nil
	}
	if req.Policy != "" {
		return out, badRequest("policy", "excluded", "give either policy or an inline limit (limit, window, algorithm, burst), not both")
	}
	if req.Limit == nil {
		return out, badRequest("limit", "required", "limit is required for an inline limit")
	}
	if req.Window == nil {
		return out, badRequest("window", "required", "window is required for an inline limit (a duration such as 10s)")
	}
	l := ratelimit.Limit{Algorithm: ratelimit.Algorithm(valueOr(req.Algorithm, "")), Limit: *req.Limit, Window: parseDuration(req.Window)}
	if req.Burst != nil {
		if *req.Burst < 1 {
			return out, badRequest("burst", "min", "burst must be at least 1, got "+strconv.FormatInt(*req.Burst, 10))
		}
		l.Burst = *req.Burst
	}
	out.Inline = &l
	return out, nil
}

// handleCheckRateLimit implements operationId checkRateLimit. Returns the
// errors of decoding the request (see decodeCheck) and of
// ratelimit.Service.Check (finding the caller's key or the cost among
// them).
func (a *api) handleCheckRateLimit(w http.ResponseWriter, r *http.Request) error {
	req, err := a.decodeCheck(w, r)
	if err != nil {
		return err
	}
	sreq, err := req.toServiceRequest()
	if err != nil {
		return err
	}
	if sreq.Inline == nil && sreq.Policy != "" {
		// A policy without an explicit key limits the caller itself; its
		// cost may come from a header.
		sreq.From = a.source(r)
	} else if sreq.Key == "" && sreq.Inline != nil {
		return badRequest("key", "required", "key is required with an inline limit")
	}
	d, err := a.svc.Check(r.Context(), sreq)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if !d.Allowed {
		status = http.StatusTooManyRequests
	}
	a.writeDecision(w, status, d)
	return nil
}

// writeDecision answers a decision with its headers and JSON body.
func (a *api) writeDecision(w http.ResponseWriter, status int, d ratelimit.Decision) {
	setRateLimitHeaders(w.Header(), d, a.cfg.RateLimit.LegacyHeaders)
	writeDecisionJSON(w, status, toDecisionResponse(d))
}

func toDecisionResponse(d ratelimit.Decision) decisionResponse {
	return decisionResponse{
		Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		ResetMS: ceilMillis(d.ResetAfter), RetryAfterMS: ceilMillis(d.RetryAfter),
		Policy: d.Policy, Key: d.Key, Binding: d.Binding, Degraded: d.Degraded,
	}
}

// resetKeyResponse is the body of DELETE
// /v1/ratelimit/policies/{policy}/keys/{key}.
type resetKeyResponse struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	// Counters is how many of the key's counters there were.
	Counters int64 `json:"counters"`
}

// handleResetRateLimitKey implements operationId resetRateLimitKey: an
// admin gives one key of a policy its full limits again. Returns a
// forbidden error without the admin credential, and the errors of
// ratelimit.Service.ResetKey (policy-not-found, invalid-request for a
// malformed key).
func (a *api) handleResetRateLimitKey(w http.ResponseWriter, r *http.Request) error {
	if err := a.checkAdminTo(r, "resetting a rate-limit key"); err != nil {
		return err
	}
	policy, key := chi.URLParam(r, "policy"), pathParam(r, "key")
	n, err := a.svc.ResetKey(r.Context(), policy, key)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, resetKeyResponse{Policy: policy, Key: key, Counters: n})
	return nil
}
