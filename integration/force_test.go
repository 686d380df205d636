package integration

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// forcePrimitive is one lease primitive as the force tests take and read it.
type forcePrimitive struct {
	path, acquire string // the resource's path and an acquire body
}

var forcePrimitives = []forcePrimitive{
	{"/v1/locks/", `{"ttl":"1m"}`},
	{"/v1/rwlocks/", `{"mode":"write","ttl":"1m"}`},
	{"/v1/semaphores/", `{"permits":2,"ttl":"1m"}`},
	{"/v1/elections/", `{"value":"v","ttl":"1m"}`},
}

// badForces are the ?force= spellings a release refuses with a 400 naming
// the parameter (or the query that hides it).
var badForces = []struct{ query, field string }{
	{"force=1", "force"}, {"force=t", "force"}, {"force=T", "force"}, {"force=TRUE", "force"},
	{"force=True", "force"}, {"force=yes", "force"}, {"force=", "force"},
	{"force=false&force=true", "force"}, {"force=true&force=true", "force"}, {"Force=true", "Force"}, {"force=%zz", "query"},
}

// TestForceSpellingsChangeNothing: on every primitive, with a keys file and
// with only an admin key, each spelling of force but true and false is a
// 400 naming it, for the holder and the admin alike, and force=true from
// the holder is a 403: none of them changes a byte in Redis, and the lease
// is still held. The admin's force=true then force-releases it, and the
// holder learns why.
func TestForceSpellingsChangeNothing(t *testing.T) {
	modes := []struct {
		desc          string
		opts          []envOption
		holder, admin []string
	}{
		{"API keys", []envOption{withKeysFile(writeKeysFile(t, tenantsFile("")))}, bearer(secretA), bearer(secretAdminA)},
		{"admin key only", nil, nil, bearer(testAdminKey)},
	}
	for _, mode := range modes {
		t.Run(mode.desc, func(t *testing.T) {
			e := newTestEnv(t, mode.opts...)
			for _, p := range forcePrimitives {
				name := p.path + "victim"
				held := e.do(t, "POST", name, p.acquire, mode.holder...)
				wantStatus(t, held, http.StatusCreated)
				holder := append([]string{"Lock-Token", held.Token()}, mode.holder...)
				before := e.dumps(t)
				for _, bad := range badForces {
					for who, headers := range map[string][]string{"holder": holder, "admin": mode.admin} {
						r := e.do(t, "DELETE", name+"?"+bad.query, "", headers...)
						pr := wantProblem(t, r, http.StatusBadRequest, "invalid-request")
						if len(pr.Errors) != 1 || pr.Errors[0].Field != bad.field {
							t.Errorf("%s?%s from the %s: errors = %+v, want one naming %s", name, bad.query, who, pr.Errors, bad.field)
						}
					}
				}
				wantProblem(t, e.do(t, "DELETE", name+"?force=true", "", holder...), http.StatusForbidden, "forbidden")
				if diff := cmp.Diff(before, e.dumps(t)); diff != "" {
					t.Errorf("%s: refused releases changed Redis (-before +after):\n%s", name, diff)
				}
				wantStatus(t, e.do(t, "DELETE", name+"?force=true", "", mode.admin...), http.StatusNoContent)
				st := e.do(t, "GET", name, "", holder...)
				wantStatus(t, st, http.StatusOK)
				if got := st.JSON(t)["lost_reason"]; got != "force_released" {
					t.Errorf("%s: the holder's lost_reason = %v, want force_released", name, got)
				}
			}
		})
	}
}
