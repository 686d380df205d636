package handlers

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
)

// ProblemRow is one row of the problem table, for the table's test.
type ProblemRow struct {
	Type, Title string
	Status      int
	Matches     bool // the row maps service errors (else the HTTP layer raises it)
}

// ProblemRows lists the rows of problemTypes in order.
func ProblemRows() []ProblemRow {
	out := make([]ProblemRow, 0, len(problemTypes))
	for _, row := range problemTypes {
		out = append(out, ProblemRow{Type: row.typ, Title: row.title, Status: row.status, Matches: row.match != nil})
	}
	return out
}

// DecisionResponse is the decision body, for the JSON encoding test.
type DecisionResponse = decisionResponse

// AppendDecisionJSON is appendDecisionJSON, for the JSON encoding test.
var AppendDecisionJSON = appendDecisionJSON

// LeaseResponse and KeepaliveResponse are the lease bodies, for the JSON
// encoding test.
type (
	LeaseResponse     = leaseResponse
	KeepaliveResponse = keepaliveResponse
	// ElectionLeaseResponse is a leadership's body.
	ElectionLeaseResponse = electionLeaseResponse
)

// AppendLeaseJSON is appendLeaseJSON, for the JSON encoding test.
var AppendLeaseJSON = appendLeaseJSON

// AppendElectionLeaseJSON is appendElectionLeaseJSON, for the JSON encoding
// test.
var AppendElectionLeaseJSON = appendElectionLeaseJSON

// SetRateLimitHeaders is setRateLimitHeaders, for the header bytes test.
var SetRateLimitHeaders = setRateLimitHeaders

// RouteScope is the scope a /v1 route needs, and whether the scope table
// names it, for the table's test.
func RouteScope(method, pattern string) (string, bool) {
	s, ok := routeScopes[method+" "+pattern]
	if !ok {
		s, ok = routeScopes["* "+pattern]
	}
	return string(s), ok
}

// CheckBodyFields are the member names the check body's hand-written
// reader knows, and CheckRequestFields the JSON names of checkRequest.
func CheckBodyFields() []string {
	var out []string
	for _, f := range checkFields {
		out = append(out, f.name)
	}
	return out
}

// CheckRequestFields lists the JSON names of the check body's fields.
func CheckRequestFields() []string {
	t := reflect.TypeOf(checkRequest{})
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}

// ParseCheckBody is the hand-written reader of a check body: the request
// it read (as text) and whether it took the body.
func ParseCheckBody(body string) (string, bool) {
	var req checkRequest
	if !parseCheckBody([]byte(body), &req) {
		return "", false
	}
	return showCheckRequest(req), true
}

// DecodeCheckBodyGeneric decodes a check body with the generic decoder
// and validator: the request (as text), or their error.
func DecodeCheckBodyGeneric(body string) (string, error) {
	var req checkRequest
	a := &api{validate: newValidator()}
	r := httptest.NewRequest(http.MethodPost, "/v1/ratelimit/check", nil)
	r.Header.Set("Content-Type", "application/json")
	if err := a.decodeBody(r, []byte(body), &req); err != nil {
		return "", err
	}
	return showCheckRequest(req), nil
}

func showCheckRequest(req checkRequest) string {
	show := func(p any) string {
		switch v := p.(type) {
		case *int64:
			if v != nil {
				return strconv.FormatInt(*v, 10)
			}
		case *string:
			if v != nil {
				return strconv.Quote(*v)
			}
		}
		return "nil"
	}
	return fmt.Sprintf("policy=%q key=%q limit=%s window=%s algorithm=%s burst=%s cost=%s peek=%v",
		req.Policy, req.Key, show(req.Limit), show(req.Window), show(req.Algorithm), show(req.Burst), show(req.Cost), req.Peek)
}
