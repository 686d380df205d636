package ratelimit

import (
	"context"
	"errors"
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
	// Using, when its Name is set, is the policy to decide under, as
	// Service.Policy returned it; Policy is then ignored. A caller that
	// looked the policy up to find the key or the cost passes it here, so
	// the decision uses the same policy even when a reload replaced it in
	// between: one request never mixes two policy sets.
	Using Policy
	// Keys are the keys of a multi-limit policy's limits, one per limit in
	// the policy's order; when nil, every limit takes Key, but a "const"
	// limit, whose key is ConstKey. Single-limit policies use Key only.
	Keys []string
	// Peek asks for the decision without counting anything: an allowed
	// answer leaves every limit as it was (Remaining is what is left now).
	Peek bool
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

// Policy returns the named policy of the active set. Returns a
// *PolicyNotFoundError (ErrNotFound) when there is none, or a
// *ValidationError for a malformed name.
func (s *Service) Policy(name string) (Policy, error) {
	return s.set.Load().policy(name)
}

// decide decides whether req.Key may spend req.Cost under the named
// policy or the inline limit, and counts it when allowed. The Redis call is
// bounded by Config.Timeout; when it fails, a fail-open policy
// answers a Degraded allowed Decision and a fail-closed one an error.
//
// Every policy is decided here the same way, as a list of limits (one for
// a single-limit policy or an inline limit): allowed only if every enforced
// limit allows, and then counted by every one; a denial counts nothing
// anywhere. How the limits are run (the deny cache, the units held of
// leased limits, the scripts) is run's.
//
// Returns a *ValidationError (ErrInvalid) for a bad key, cost or inline
// limit, or for inline limits when they are disabled; a *PolicyNotFoundError
// (ErrNotFound); an error wrapping ErrUnavailable (fail-closed policies and
// inline limits); or the caller's context error.
func (s *Service) decide(ctx context.Context, req Request) (Decision, error) {
	set := s.set.Load()
	pol, err := s.resolvePolicy(set, req)
	if err != nil {
		return Decision{}, err
	}
	keys, err := limitKeys(pol, req)
	if err != nil {
		return Decision{}, err
	}
	what := "the limit"
	if pol.Multi() {
		what = "the policy's smallest limit"
	}
	sp := set.spec(pol)
	if req.Cost < 0 {
		return s.refund(ctx, pol, sp, keys, req)
	}
	cost, err := checkCost(req.Cost, pol.maxCost(), what)
	if err != nil {
		return Decision{}, err
	}
	ctr := s.countersFor(set, pol)
	// A single-limit decision's answer per limit and reply stay on the
	// stack: only a multi-limit policy's answer carries its Limits.
	var one [1]LimitDecision
	var reply [multiReplyPer]int64
	lds, v := one[:], reply[:]
	var multi []LimitDecision
	if pol.Multi() {
		multi = make([]LimitDecision, len(sp.limits))
		lds, v = multi, make([]int64, multiReplyPer*len(sp.limits))
	}
	for i, l := range sp.limits {
		lds[i] = LimitDecision{Name: l.Name, Key: keys.at(i), Limit: l.Limit.Limit, Window: l.Window}
	}
	d := Decision{Policy: pol.Name, Limits: multi}
	takes, at, cached, err := s.run(ctx, ctr, sp, redisKeys(store.PrefixFor(ctx, s.prefix), s.buckets, pol, keys), cost, v, req.Peek)
	if err != nil {
		return s.failOpenDecision(ctx, ctr, pol, sp, d, lds, cost, err)
	}
	d.Allowed = true
	for i := range lds {
		ld := &lds[i]
		status := v[multiReplyPer*i]
		ld.Allowed = status != multiDenied && status != multiWouldDeny
		ld.Remaining = v[multiReplyPer*i+1]
		ld.ResetAfter = time.Duration(v[multiReplyPer*i+2]) * time.Millisecond
		ld.RetryAfter = time.Duration(v[multiReplyPer*i+3]) * time.Millisecond
		switch {
		case status == multiWouldDeny:
			d.WouldDeny = true
		case status != multiCounted:
			d.Allowed = false
		}
		if takes != nil && takes[i].pool != nil && ld.Remaining < 0 { // answered from the lease
			ld.Remaining, ld.ResetAfter = takes[i].pool.local(time.Now())
		}
		if c := sp.limits[i].Calendar; c != nil {
			start, end := c.Bounds(at)
			ld.Window = end.Sub(start)
		}
		if !req.Peek {
			ctr.countLimit(i, ld.Name, status)
		}
	}
	d.Cached = cached && !d.Allowed
	if req.Peek {
		return peeked(pol, bind(d, lds)), nil
	}
	return count(ctr, pol, bind(d, lds)), nil
}

// peeked is the answer to a peek: as count's, counting nothing.
func peeked(pol Policy, d Decision) Decision {
	if !d.Allowed && pol.Shadow {
		d.Allowed, d.WouldDeny, d.RetryAfter = true, true, 0
	}
	return d
}

// checkCost checks a request's cost against max, the most a request may
// cost, and returns it (1 when unset).
func checkCost(cost, max int64, what string) (int64, error) {
	if cost == 0 {
		cost = 1
	}
	if cost < 0 {
		return 0, invalid("cost", "min", "cost must be at least 1, got %d", cost)
	}
	if cost > max {
		return 0, invalid("cost", "max", "cost %d is above what %s can ever allow at once (%d)", cost, what, max)
	}
	return cost, nil
}

// failOpenDecision answers a decision whose limits could not be run (err): a
// fail-open policy allows it, Degraded, uncounted, as if each limit had its
// whole capacity; a fail-closed one, or an error that is not the store's
// being unavailable, returns err.
func (s *Service) failOpenDecision(ctx context.Context, ctr *decisionCounters, pol Policy, sp limitSpec, d Decision, lds []LimitDecision, cost int64, err error) (Decision, error) {
	if !errors.Is(err, store.ErrUnavailable) || pol.Fail == FailClosed {
		return Decision{}, err
	}
	ctr.failOpen.Inc()
	s.logFailOpen(ctx, pol.Name, err)
	now := time.Now()
	for i, l := range sp.limits {
		ld := &lds[i]
		ld.Allowed, ld.Remaining, ld.ResetAfter = true, l.capacity()-cost, l.Window
		if l.Calendar != nil { // by this instance's clock: Redis's is out of reach
			start, end := l.Calendar.Bounds(now)
			ld.Window, ld.ResetAfter = end.Sub(start), end.Sub(now)
		}
	}
	d.Allowed, d.Degraded = true, true
	return bind(d, lds), nil
}

// resolvePolicy finds the policy of req in set (or req.Using), or builds
// the inline one.
func (s *Service) resolvePolicy(set *policySet, req Request) (Policy, error) {
	switch {
	case req.Using.Name != "":
		return req.Using, nil
	case req.Policy != "" && req.Inline != nil:
		return Policy{}, invalid("policy", "excluded", "give either policy or an inline limit (limit, window, algorithm, burst), not both")
	case req.Policy != "":
		return set.policy(req.Policy)
	case req.Inline == nil:
		return Policy{}, invalid("policy", "required", "policy is required (or an inline limit: key, limit, window)")
	case !s.cfg.AllowInline:
		return Policy{}, invalid("limit", "disabled", "inline limits are disabled on this server: name a configured policy instead")
	}
	l := *req.Inline
	if l.Lease != 0 {
		return Policy{}, invalid("lease", "excluded", "lease is for the policies of the policy file only, not inline limits")
	}
	if l.Algorithm == "" {
		l.Algorithm = FixedWindow
	}
	if err := s.cfg.validateLimit("", l); err != nil {
		return Policy{}, err
	}
	if err := s.cfg.validateInline(l); err != nil {
		return Policy{}, err
	}
	return Policy{Name: InlinePolicyName, Limit: l, Key: "ip", DenyStatus: 429, Fail: FailClosed}, nil
}

// bind fills in the Decision's own fields from its binding limit among lds,
// its limits' answers: on a denial the denying limit that frees up last
// (ties: the least remaining), with RetryAfter the latest of the denying
// limits'; when allowed, the limit with the least remaining (ties: the one
// that resets last), which may be a shadow limit that would deny. Binding
// is named for a multi-limit policy only (whose Limits are lds).
func bind(d Decision, lds []LimitDecision) Decision {
	b := -1
	for i, l := range lds {
		if !d.Allowed && l.Allowed {
			continue
		}
		if b < 0 {
			b = i
			continue
		}
		cur := lds[b]
		var better bool
		if !d.Allowed {
			better = l.RetryAfter > cur.RetryAfter || l.RetryAfter == cur.RetryAfter && l.Remaining < cur.Remaining
		} else {
			better = l.Remaining < cur.Remaining || l.Remaining == cur.Remaining && l.ResetAfter > cur.ResetAfter
		}
		if better {
			b = i
		}
	}
	if b < 0 { // a denial without a denying limit: cannot happen
		b = 0
	}
	l := lds[b]
	if d.Limits != nil {
		d.Binding = l.Name
	}
	d.Key, d.Limit, d.Window = l.Key, l.Limit, l.Window
	d.Remaining, d.ResetAfter, d.RetryAfter = l.Remaining, l.ResetAfter, l.RetryAfter
	if d.Allowed {
		d.RetryAfter = 0 // a shadow limit's would-deny binds, but allows
	}
	return d
}

// count counts a decision under pol in its policy's metrics and returns the
// answer: a denial by a shadow policy becomes an allowed answer marked
// WouldDeny. The script consumed nothing for the denial, so the shadow
// answer consumes nothing either, and a shadow policy counts exactly what
// it would count if it were enforced. An allowed answer already marked
// WouldDeny is one a shadow limit of the policy would have denied (see
// NamedLimit.Shadow); it counts as a would-denial too.
func count(ctr *decisionCounters, pol Policy, d Decision) Decision {
	switch {
	case d.Allowed:
		ctr.allowed.Inc()
		if d.WouldDeny {
			ctr.wouldDeny.Inc()
		}
	case pol.Shadow:
		ctr.wouldDeny.Inc()
		ctr.allowed.Inc()
		d.Allowed, d.WouldDeny, d.RetryAfter, d.Cached = true, true, 0, false
	default:
		ctr.denied.Inc()
	}
	return d
}

// logFailOpen warns that a policy failed open, at most once per LogInterval.
func (s *Service) logFailOpen(ctx context.Context, policy string, err error) {
	now := time.Now().UnixNano()
	last := s.lastLog.Load()
	if now-last < int64(s.cfg.LogInterval) || !s.lastLog.CompareAndSwap(last, now) {
		return
	}
	s.cfg.Logger.WarnContext(ctx, "redis unreachable: rate-limit policies fail open (allowing unchecked requests)",
		"policy", policy, "err", err, "next_log_in", s.cfg.LogInterval.String())
}
