package handlers

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"github.com/latchkey/latchkey/service/auth"
)

// forceParam reads the ?force= of a release: the one reading of it, used
// both by the scope check (see routeScope) and by the release itself (see
// primitive.handleRelease), so the two never disagree on whether a
// request is an admin action. Absent, it is false; given once, it is
// exactly true or false. Returns an invalid-request error naming force
// for any other spelling (1, t, TRUE, yes, an empty value) and for force
// given more than once, naming a parameter Force or FORCE (names are
// case-sensitive, and one meant as force must not pass for a release), and
// naming the query when the query string cannot be parsed (a force could
// hide in it).
func forceParam(r *http.Request) (bool, error) {
	v, _, err := oneOfParam(r, "force", "true", "false")
	return v == "true", err
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

// checkAdminTo is checkAdmin for an admin action other than force-release:
// when an admin key is configured, its forbidden error says what needs the
// admin credential.
func (a *api) checkAdminTo(r *http.Request, what string) error {
	err := a.checkAdmin(r)
	if he := (*httpError)(nil); err != nil && a.cfg.AdminKey != "" && errors.As(err, &he) && he.typ == forbidden {
		err = &httpError{typ: forbidden, detail: what + " needs the admin credential: Authorization: Bearer <admin key>"}
	}
	return err
}
