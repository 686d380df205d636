package handlers

import (
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// handleGateRateLimit implements the gateway route (operationId
// gateRateLimit and its siblings, one per method): the key comes from the
// request itself as the policy says, there is no body. Returns the errors
// of ratelimit.Service.Policy and Check, of finding the caller's key, and
// a rate-limited error for a denial answered as a problem.
func (a *api) handleGateRateLimit(w http.ResponseWriter, r *http.Request) error {
	pol, err := a.svc.Policy(chi.URLParam(r, "policy"))
	if err != nil {
		return err
	}
	req, err := a.gateRequest(r, pol)
	if err != nil {
		return err
	}
	d, err := a.svc.Check(r.Context(), req)
	if err != nil {
		return err
	}
	return a.writeGateDecision(w, r, pol.DenyStatus, d)
}

// writeGateDecision answers a decision of the gate. Gateways act on the
// status and the headers; nginx never reads the body of an auth_request
// subrequest, and an unread body costs it its keep-alive connection to
// Latchkey. So the gate sends a body only where it is read:
//   - HEAD: the status and headers, never a body;
//   - Accept lists application/json (q > 0): the decision JSON, allowed or
//     denied, as POST /v1/ratelimit/check answers it;
//   - otherwise, allowed: 200 with Content-Length: 0; denied: a rate-limited
//     problem (application/problem+json), which Traefik's ForwardAuth and
//     Envoy's ext_authz hand on to the client with the denial.
func (a *api) writeGateDecision(w http.ResponseWriter, r *http.Request, denyStatus int, d ratelimit.Decision) error {
	h := w.Header()
	setRateLimitHeaders(h, d, a.cfg.RateLimit.LegacyHeaders)
	status := http.StatusOK
	if !d.Allowed {
		status = denyStatus
	}
	switch {
	case r.Method == http.MethodHead:
		h["Cache-Control"] = noStore
		w.WriteHeader(status)
	case acceptsJSON(r.Header["Accept"]):
		writeDecisionJSON(w, status, toDecisionResponse(d))
	case d.Allowed:
		h["Cache-Control"] = noStore
		h["Content-Length"] = zeroLength
		w.WriteHeader(status)
	default:
		return &httpError{typ: rateLimited, status: denyStatus,
			detail: "rate limit " + strconv.Quote(d.Policy) + bindingDetail(d) + " of " + strconv.FormatInt(d.Limit, 10) + " per " +
				strconv.FormatInt(ceilSeconds(d.Window), 10) + "s reached; retry after " + retryAfterSeconds(d.RetryAfter) + "s"}
	}
	return nil
}

// bindingDetail names the binding limit of a multi-limit decision in a
// denial's detail; "" for a single-limit one.
func bindingDetail(d ratelimit.Decision) string {
	if d.Binding == "" {
		return ""
	}
	return " (limit " + strconv.Quote(d.Binding) + ")"
}

// acceptsJSON reports whether Accept header values list application/json
// with a non-zero quality. Wildcards (*/*, application/*) do not count:
// browsers and curl send them without asking for anything in particular.
func acceptsJSON(accept []string) bool {
	for _, v := range accept {
		if !strings.Contains(strings.ToLower(v), "application/json") {
			continue
		}
		for _, part := range strings.Split(v, ",") {
			mt, params, err := mime.ParseMediaType(part)
			if err != nil || mt != "application/json" {
				continue
			}
			if q, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(q, 64); err != nil || f <= 0 {
					continue
				}
			}
			return true
		}
	}
	return false
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
