package handlers

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/latchkey/latchkey/service/store"
)

// queryParam reads the query parameter name of r, which may be given at
// most once: its value and whether it was given. It is the one reading of
// a query parameter, so that every parameter has the same rules. Returns
// an invalid-request error naming the query when the query string cannot
// be parsed (a parameter could hide in it), naming a parameter whose name
// differs from name only in case (names are case-sensitive, and one meant
// as name must not pass unread), and naming name when it is given more
// than once.
func queryParam(r *http.Request, name string) (string, bool, error) {
	q, err := parseQuery(r)
	if err != nil {
		return "", false, err
	}
	for n := range q {
		if n != name && strings.EqualFold(n, name) {
			return "", false, badRequest(n, "unknown", "unknown query parameter "+store.Quote(n)+
				" (parameter names are case-sensitive): did you mean "+strconv.Quote(name)+"?")
		}
	}
	vs, ok := q[name]
	switch {
	case !ok:
		return "", false, nil
	case len(vs) > 1:
		return "", false, badRequest(name, "duplicate",
			name+" must be given at most once, got it "+strconv.Itoa(len(vs))+" times")
	}
	return vs[0], true, nil
}

// knownParams refuses a query parameter of r other than accepted, the
// ones its route reads: one it does not read must not pass for a setting
// the client believes it made (?ttl=5m on an acquire, whose ttl is in the
// body). Returns queryParam's error for a query string that cannot be
// parsed, and an invalid-request error naming the first unknown parameter
// (in name order) and listing the route's.
func knownParams(r *http.Request, accepted ...string) error {
	if r.URL.RawQuery == "" {
		return nil // most requests: no map to build
	}
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	names := slices.Sorted(maps.Keys(q))
	for _, n := range names {
		if slices.Contains(accepted, n) {
			continue
		}
		detail := "unknown query parameter " + store.Quote(n)
		for _, a := range accepted {
			if strings.EqualFold(n, a) {
				return badRequest(n, "unknown", detail+" (parameter names are case-sensitive): did you mean "+strconv.Quote(a)+"?")
			}
		}
		if len(accepted) == 0 {
			return badRequest(n, "unknown", detail+": this route takes no query parameter")
		}
		quoted := make([]string, len(accepted))
		for i, a := range accepted {
			quoted[i] = strconv.Quote(a)
		}
		return badRequest(n, "unknown", detail+": this route takes only "+strings.Join(quoted, " and "))
	}
	return nil
}

// parseQuery parses r's query string. Returns an invalid-request error
// naming the query when it cannot be parsed.
func parseQuery(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("query", "format",
			"the query string is malformed ("+err.Error()+"): escape '%' as %25 and separate parameters with '&'")
	}
	return q, nil
}

// oneOfParam reads the query parameter name as queryParam does, and
// requires its value, when given, to be one of values exactly. Returns
// queryParam's errors, and an invalid-request error naming name and
// quoting the value for any other value (an empty one included).
func oneOfParam(r *http.Request, name string, values ...string) (string, bool, error) {
	v, ok, err := queryParam(r, name)
	if err != nil || !ok {
		return "", false, err
	}
	for _, want := range values {
		if v == want {
			return v, true, nil
		}
	}
	return "", false, badRequest(name, "oneof", name+" must be "+strings.Join(values, " or ")+
		" (in lower case), got "+store.Quote(v))
}
