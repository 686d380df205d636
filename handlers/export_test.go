package handlers

import "sort"

// ProblemTableTypes lists the problem type of every row of problemTable.
func ProblemTableTypes() []string {
	out := make([]string, 0, len(problemTable))
	for _, rule := range problemTable {
		out = append(out, rule.typ)
	}
	return out
}

// TitledTypes lists every problem type that has a title.
func TitledTypes() []string {
	out := make([]string, 0, len(titles))
	for typ := range titles {
		out = append(out, typ)
	}
	sort.Strings(out)
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
)

// AppendLeaseJSON is appendLeaseJSON, for the JSON encoding test.
var AppendLeaseJSON = appendLeaseJSON
