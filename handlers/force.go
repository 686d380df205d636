package handlers

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/latchkey/latchkey/service/auth"
	"github.com/latchkey/latchkey/service/store"
)

// forceParam reads the ?force= of a release: the one reading of it, used
// both by the scope check (see routeScope) and by the release itself (see
// releaseOrForce), so the two never disagree on whether a request is an
// admin action. Absent, it is false; given once, it is exactly true or
// false. Returns an invalid-request error naming force for any other
// spelling (1, t, TRUE, yes, an empty value) and for force given more
// than once, naming a parameter Force or FORCE (names are case-sensitive,
// and one meant as force must not pass for a release), and naming the
// query when the query string cannot be parsed (a force could hide in it).
func forceParam(r *http.Request) (bool, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return false, badRequest("query", "format",
			"the query string is malformed ("+err.Error()+"): escape '%' as %25 and separate parameters with '&'")
	}
	for name := range q {
		if name != "force" && strings.EqualFold(name, "force") {
			return false, badRequest(name, "unknown", "unknown query parameter "+strconv.Quote(name)+
				" (parameter names are case-sensitive): did you mean \"force\"?")
		}
	}
	vs, ok := q["force"]
	switch {
	case !ok:
		return false, nil
	case len(vs) > 1:
		return false, badRequest("force", "duplicate",
			"force must be given at most once, got it "+strconv.Itoa(len(vs))+" times")
	}
	switch vs[0] {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, badRequest("force", "oneof", "force must be true or false (in lower case), got "+store.Quote(vs[0]))
}

// checkAdmin requires the admin credential: with API keys on, the key the
// request was authenticated with must have the admin scope; without them,
// Authorization: Bearer <admin key>. Returns a forbidden error otherwise,
// and when no admin key is configured without API keys.
func (a *api) checkAdmin(r *http.Request) error {
	if key := keyOf(r.Context()); key != nil {
		if key.Has(auth.ScopeAdmin) {
			return nil
		}
		return lacksScope(key, auth.ScopeAdmin)
	}
	if a.cfg.AdminKey == "" {
		return &httpError{typ: forbidden,
			detail: "admin actions are disabled: the server has no admin key configured (LATCHKEY_ADMIN_KEY)"}
	}
	credential, err := singleHeader(r, "Authorization")
	if err != nil {
		return err
	}
	// The scheme is case-insensitive (RFC 9110 §11.1): "bearer" is Bearer.
	scheme, got, ok := strings.Cut(credential, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), []byte(a.cfg.AdminKey)) != 1 {
		return &httpError{typ: forbidden,
			detail: "force-release needs the admin credential: Authorization: Bearer <admin key>"}
	}
	return nil
}
