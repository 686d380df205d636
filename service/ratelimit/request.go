package ratelimit

import (
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// Request asks for one rate-limit decision: either a named Policy
// or an Inline limit, for Key, costing Cost units (default 1). A negative
// Cost gives -Cost units back to the fixed-window limits that counted
// them (see Service.Check).
type Request struct {
	Policy string
	Inline *Limit
	Key    string
	Cost   int64
	// From, when set, is the request a decision under a policy takes what
	// it does not give from: the key (Key "" and Keys nil) and the cost
	// (Cost 0), as the policy says (see Policy.Complete). Inline limits
	// ignore it.
	From Source
	// Using, when its Name is set, is the policy to decide under, as
	// Service.Policy returned it (or one outside the active set, such as a
	// tenant's request-rate quota); Policy is then ignored. A caller that
	// looked the policy up to find the key or the cost passes it here, so
	// the decision uses the same policy even when a reload replaced it in
	// between: one request never mixes two policy sets. (A request with
	// From, and Service.Gate, find the key and the cost under the policy
	// they decide under.)
	Using Policy
	// Keys are the keys of a multi-limit policy's limits, one per limit in
	// the policy's order; when nil, every limit takes Key, but a "const"
	// limit, whose key is ConstKey. Single-limit policies use Key only.
	Keys []string
	// Peek asks for the decision without counting anything: an allowed
	// answer leaves every limit as it was (Remaining is what is left now).
	Peek bool
}

// Source is the request a decision takes its keys and cost from when it
// does not give them: the attributes a policy's key spec (Policy.Key,
// NamedLimit.Key) and its cost header (CostSource) read. The HTTP layer
// supplies one per request; what each key source means, how the keys of a
// policy's limits are put together and checked, is this package's
// (sourceKeys). A Source is read while its decision is taken, never kept.
type Source interface {
	// ClientKey returns the client's address as a rate-limit key (an
	// "ip" key), or an error saying why it cannot be found.
	ClientKey() (string, error)
	// Header returns the values the request sent for the named header, in
	// order; none when it sent none.
	Header(name string) []string
	// GatePath returns what follows the policy's name and a '/' in the
	// path of a request to the gate, /v1/ratelimit/gate/{policy}/KEY (""
	// when nothing does), and true; false for a request that is not one to
	// the gate.
	GatePath() (string, bool)
}

// Decision is the answer to a Request. A denial is a Decision with
// Allowed false, not an error.
type Decision struct {
	Allowed    bool
	Policy     string // the policy's name, or InlinePolicyName
	Key        string
	Limit      int64         // cost units per window
	Window     time.Duration // the policy's window
	Remaining  int64         // cost units left after this decision
	ResetAfter time.Duration // until the full limit is available again
	RetryAfter time.Duration // zero when allowed; else when the same request will be allowed
	// Degraded is true when Redis could not be reached and the policy failed
	// open: the request was allowed without being counted.
	Degraded bool
	// Cached is true when the denial came from the in-process cache of keys
	// known to be over their limit, without a Redis call.
	Cached bool
	// WouldDeny is true when a shadow policy would have denied the request:
	// Allowed is true, and nothing was consumed.
	WouldDeny bool
	// Limits are the answers of each limit of a multi-limit policy, in the
	// policy's order; nil for a single-limit policy. The fields above are
	// then those of the binding limit, Binding names it, and RetryAfter is
	// the latest RetryAfter of the limits that deny.
	Limits []LimitDecision
	// Binding is the name of the binding limit of a multi-limit policy:
	// on a denial, the denying limit that frees up last; when allowed, the
	// limit with the least remaining (ties: the one that resets last).
	Binding string
}

// LimitDecision is one limit's part in a multi-limit decision.
type LimitDecision struct {
	Name       string
	Key        string
	Limit      int64
	Window     time.Duration
	Allowed    bool // this limit allows the request (counted only if all do)
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration // zero when this limit allows
}

// PolicyNotFoundError reports an unknown policy name. It wraps ErrNotFound.
type PolicyNotFoundError struct{ Name string }

func (e *PolicyNotFoundError) Error() string { return "ratelimit: no policy named " + e.Name }

// Unwrap makes errors.Is(err, ErrNotFound) true.
func (e *PolicyNotFoundError) Unwrap() error { return store.ErrNotFound }
