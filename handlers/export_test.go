package handlers

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
