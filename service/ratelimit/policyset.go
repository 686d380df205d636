package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PolicySet is the set of named policies decisions use: every decision takes
// its policy from one set, never from two. SetPolicies replaces the active
// set as a whole.
type PolicySet struct {
	// Version names the set's contents: the first 12 hex digits of the
	// SHA-256 of its canonical JSON. It changes exactly when a policy does.
	Version string
	// LoadedAt is when the set became active.
	LoadedAt time.Time
	// Policies are the policies, sorted by name, with their defaults filled
	// in.
	Policies []Policy
}

// policySet is an immutable PolicySet with its lookup tables; the Service
// swaps a pointer to it (see SetPolicies).
type policySet struct {
	PolicySet
	byName map[string]Policy
	// counters holds each policy's metrics, looked up once per set.
	counters map[string]*decisionCounters
	// specs are how each policy is decided (see limitSpec), built once
	// per set.
	specs map[string]limitSpec
}

// newPolicySet builds a set of policies (already validated) with their
// counters in the Service's metrics.
func (s *Service) newPolicySet(ps []Policy, now time.Time) *policySet {
	set := &policySet{byName: make(map[string]Policy, len(ps)), counters: make(map[string]*decisionCounters, len(ps)),
		specs: make(map[string]limitSpec, len(ps))}
	set.Policies = make([]Policy, len(ps))
	for i, p := range ps {
		p = p.withDefaults()
		set.Policies[i] = p
		set.byName[p.Name] = p
		set.counters[p.Name] = s.newCounters(p)
		set.specs[p.Name] = newLimitSpec(p)
	}
	slices.SortFunc(set.Policies, func(a, b Policy) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	set.Version = policyVersion(set.Policies)
	set.LoadedAt = now
	return set
}

// policyVersion is a set's Version: a hash of its sorted policies as JSON.
func policyVersion(ps []Policy) string {
	b, err := json.Marshal(ps)
	if err != nil {
		panic("ratelimit: policies do not encode: " + err.Error()) // plain values: cannot happen
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// ActivePolicies returns the set decisions use now. Its Policies must not
// be modified.
func (s *Service) ActivePolicies() PolicySet { return s.set.Load().PolicySet }

// SetPolicies makes ps the active policy set, atomically: a decision under
// way finishes with the set it began with, every later one uses the new set.
// The set is checked in full first; a bad one is refused with an error naming
// the policy and field at fault, and the active set stays as it was. A set
// equal to the active one changes nothing (changed is false).
//
// Counts carry over: a policy's Redis keys depend on its name, algorithm and
// the request's key only, so a policy whose algorithm is unchanged keeps its
// counters, whatever else changed in the file. The metrics of a policy no
// longer in the set are deleted, so their series stay bounded by the
// policies of the active set.
func (s *Service) SetPolicies(ps []Policy) (active PolicySet, changed bool, err error) {
	cfg := s.cfg
	cfg.Policies = ps
	if err := cfg.Validate(); err != nil {
		return s.ActivePolicies(), false, err
	}
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	old := s.set.Load()
	next := s.newPolicySet(ps, time.Now())
	if next.Version == old.Version {
		return old.PolicySet, false, nil
	}
	s.set.Store(next)
	s.views.prune(next)
	for name, p := range old.byName {
		if np, ok := next.byName[name]; !ok {
			s.deleteCounters(name)
		} else {
			s.deleteLimitCounters(p, np)
		}
	}
	// A cached denial was taken under the old limits: ask Redis again.
	s.cache.clear()
	return next.PolicySet, true, nil
}

// decisionCounters are one policy's metrics.
type decisionCounters struct {
	allowed, denied, wouldDeny, failOpen prometheus.Counter
	// limits are the counters of the policy's limits, in its order; a
	// single-limit policy's one limit is named after the policy.
	limits []limitCounters
}

// limitCounters are one limit's metrics; see Service.limitDecisions
// and Service.leaseDecisions.
type limitCounters struct {
	name                                string
	allowed, denied, blocked, wouldDeny prometheus.Counter
	leaseLocal, leaseGranted, unleased  prometheus.Counter // nil without a lease
}

// limitResults are the result labels of limitDecisions.
var limitResults = []string{"allowed", "denied", "blocked", "would_deny"}

func (s *Service) newCounters(p Policy) *decisionCounters {
	policy := p.Name
	c := &decisionCounters{allowed: s.decisions.WithLabelValues(policy, "allowed"),
		denied:    s.decisions.WithLabelValues(policy, "denied"),
		wouldDeny: s.wouldDeny.WithLabelValues(policy),
		failOpen:  s.failOpen.WithLabelValues(policy)}
	ls := p.Limits
	if !p.Multi() && policy != InlinePolicyName {
		ls = []NamedLimit{{Name: policy, Limit: p.Limit}}
	}
	for _, l := range ls {
		lc := limitCounters{name: l.Name, allowed: s.limitDecisions.WithLabelValues(policy, l.Name, "allowed"),
			denied:    s.limitDecisions.WithLabelValues(policy, l.Name, "denied"),
			blocked:   s.limitDecisions.WithLabelValues(policy, l.Name, "blocked"),
			wouldDeny: s.limitDecisions.WithLabelValues(policy, l.Name, "would_deny")}
		if l.Lease > 0 {
			lc.leaseLocal = s.leaseDecisions.WithLabelValues(policy, l.Name, "local")
			lc.leaseGranted = s.leaseDecisions.WithLabelValues(policy, l.Name, "granted")
			lc.unleased = s.leaseDecisions.WithLabelValues(policy, l.Name, "unleased")
		}
		c.limits = append(c.limits, lc)
	}
	return c
}

// countLimit counts limit i's status (as ratelimit_multi.lua's reply has
// it) in its metrics, if c has counters for it under that name.
func (c *decisionCounters) countLimit(i int, name string, status int64) {
	if i >= len(c.limits) || c.limits[i].name != name {
		return
	}
	l := c.limits[i]
	switch status {
	case multiCounted:
		l.allowed.Inc()
	case multiDenied:
		l.denied.Inc()
	case multiWouldDeny:
		l.wouldDeny.Inc()
	default:
		l.blocked.Inc()
	}
}

// lease counts a decision of leased limit i: "local", answered from the
// units this instance holds, "granted", with a new lease from Redis, or
// "unleased", counted in Redis without one (the lease table was full).
func (c *decisionCounters) lease(i int, name, source string) {
	if i >= len(c.limits) || c.limits[i].name != name || c.limits[i].leaseLocal == nil {
		return
	}
	switch source {
	case "local":
		c.limits[i].leaseLocal.Inc()
	case "granted":
		c.limits[i].leaseGranted.Inc()
	default:
		c.limits[i].unleased.Inc()
	}
}

// deleteCounters removes a policy's series from every metric.
func (s *Service) deleteCounters(policy string) {
	s.decisions.DeleteLabelValues(policy, "allowed")
	s.decisions.DeleteLabelValues(policy, "denied")
	s.wouldDeny.DeleteLabelValues(policy)
	s.failOpen.DeleteLabelValues(policy)
	s.limitDecisions.DeletePartialMatch(prometheus.Labels{"policy": policy})
	s.leaseDecisions.DeletePartialMatch(prometheus.Labels{"policy": policy})
}

// deleteLimitCounters removes the series of old's limits that next, the
// same policy in a new set, no longer has (or no longer leases).
func (s *Service) deleteLimitCounters(old, next Policy) {
	names := func(p Policy) []NamedLimit {
		if p.Multi() {
			return p.Limits
		}
		return []NamedLimit{{Name: p.Name, Limit: p.Limit}}
	}
	nl := names(next)
	for _, l := range names(old) {
		i := slices.IndexFunc(nl, func(n NamedLimit) bool { return n.Name == l.Name })
		if i < 0 {
			for _, r := range limitResults {
				s.limitDecisions.DeleteLabelValues(old.Name, l.Name, r)
			}
		}
		if i < 0 || nl[i].Lease == 0 {
			s.leaseDecisions.DeleteLabelValues(old.Name, l.Name, "local")
			s.leaseDecisions.DeleteLabelValues(old.Name, l.Name, "granted")
			s.leaseDecisions.DeleteLabelValues(old.Name, l.Name, "unleased")
		}
	}
}

// detachedCounters count the decisions of a policy that left the active set
// while they were being taken: they belong to no series, so a removed
// policy's series are not created again.
var detachedCounters = &decisionCounters{
	allowed: prometheus.NewCounter(prometheus.CounterOpts{Name: "detached"}), denied: prometheus.NewCounter(prometheus.CounterOpts{Name: "detached"}),
	wouldDeny: prometheus.NewCounter(prometheus.CounterOpts{Name: "detached"}), failOpen: prometheus.NewCounter(prometheus.CounterOpts{Name: "detached"}),
}

// countersFor returns the counters of a decision under p, taken from set.
func (s *Service) countersFor(set *policySet, p Policy) *decisionCounters {
	if p.Name == InlinePolicyName {
		return s.inline
	}
	if c, ok := set.counters[p.Name]; ok {
		return c
	}
	if c, ok := s.set.Load().counters[p.Name]; ok {
		return c
	}
	return detachedCounters
}

// clear drops every cached denial.
func (c *denyCache) clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
}

// limitSpec is how a policy is decided: its limits (a single-limit
// policy's one limit, named after the policy, in shadow mode when the
// policy is) and, for ratelimit_multi.lua, their ARGV entries after the cost
// and the units held from leases.
type limitSpec struct {
	limits []NamedLimit
	args   []any
	// one is set for one unleased limit of a policy of one (short form or
	// "limits:"): decided by its algorithm's script, batched, with its
	// nargv entries of that script's ARGV in argv (requestArgs), boxed
	// once here: a decision sets only the last, its cost.
	one   bool
	argv  [4]any
	nargv int
	// batch is set for several limits, none leased and no calendar window:
	// decided by ratelimit_multi_batch.lua through the Service's multi
	// batcher (Service.runBatched), args being their entries of its ARGV.
	batch bool
	// cache is set for a single-limit policy: its denials are cached.
	cache     bool
	leased    bool // a limit has a lease
	allLeased bool // every limit has one
	calendar  bool // a limit is a calendar window (see periodCall)
}

// newLimitSpec builds pol's spec.
func newLimitSpec(pol Policy) limitSpec {
	ls := pol.Limits
	if !pol.Multi() {
		// A shadow policy's one limit is a shadow limit: the same answer.
		ls = []NamedLimit{{Name: pol.Name, Limit: pol.Limit, Key: pol.Key, Shadow: pol.Shadow}}
	}
	sp := limitSpec{limits: ls, allLeased: true}
	for _, l := range ls {
		sp.leased = sp.leased || l.Lease > 0
		sp.allLeased = sp.allLeased && l.Lease > 0
		sp.calendar = sp.calendar || l.Calendar != nil
	}
	// A calendar window is decided by ratelimit_multi.lua, which checks its
	// period against the Redis clock.
	sp.cache = !pol.Multi() && !sp.calendar
	sp.one = len(ls) == 1 && !sp.leased && !sp.calendar
	if sp.one {
		sp.argv, sp.nargv = requestArgs(ls[0].Limit, 1)
		return sp
	}
	sp.batch = !sp.leased && !sp.calendar
	sp.args = make([]any, 0, 5*len(ls))
	for _, l := range ls {
		a := limitArgs(l)
		sp.args = append(sp.args, a[:]...)
	}
	return sp
}

// spec returns pol's spec: the set's, built once, when pol is the set's
// policy itself (a multi-limit policy's limits the same array), as a
// looked-up policy is; else built now.
func (set *policySet) spec(pol Policy) limitSpec {
	sp, ok := set.specs[pol.Name]
	if cur := set.byName[pol.Name]; ok && (pol.Multi() && len(cur.Limits) == len(pol.Limits) && &cur.Limits[0] == &pol.Limits[0] ||
		!pol.Multi() && !cur.Multi() && cur.Limit == pol.Limit && cur.Key == pol.Key && cur.Shadow == pol.Shadow) {
		return sp
	}
	return newLimitSpec(pol)
}

func (set *policySet) policy(name string) (Policy, error) {
	if err := ValidatePolicyName(name); err != nil {
		return Policy{}, err
	}
	p, ok := set.byName[name]
	if !ok {
		return Policy{}, &PolicyNotFoundError{Name: name}
	}
	return p, nil
}
