package handlers

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
)

// handleGateRateLimit implements the gateway route (operationId
// gateRateLimit and its siblings, one per method): one decision of the
// policy the path names, its key and cost taken from the request itself
// as the policy says (gateSource), answered by writeGateDecision; there is
// no body. Returns the errors of ratelimit.Service.Gate (the request's
// key or cost among them) and a rate-limited error for a denial answered
// as a problem.
func (a *api) handleGateRateLimit(w http.ResponseWriter, r *http.Request) error {
	d, denyStatus, err := a.svc.Gate(r.Context(), chi.URLParam(r, "policy"), gateSource{a.source(r)})
	if err != nil {
		return err
	}
	return a.writeGateDecision(w, r, denyStatus, d)
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
