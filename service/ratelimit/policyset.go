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
	// specs are how the policies decided by ratelimit_multi.lua are (see
	// limitSpec), built once per set.
	specs map[string]limitSpec
}

// newPolicySet builds a set of policies (already validated) with their
// counters in rl's metrics.
func (rl *rateLimiter) newPolicySet(ps []Policy, now time.Time) *policySet {
	s := &policySet{byName: make(map[string]Policy, len(ps)), counters: make(map[string]*decisionCounters, len(ps))}
	s.Policies = make([]Policy, len(ps))
	for i, p := range ps {
		p = p.withDefaults()
		s.Policies[i] = p
		s.byName[p.Name] = p
		s.counters[p.Name] = rl.newCounters(p)
		if p.decidedByLimits() {
			if s.specs == nil {
				s.specs = map[string]limitSpec{}
			}
			s.specs[p.Name] = newLimitSpec(p)
		}
	}
	slices.SortFunc(s.Policies, func(a, b Policy) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	s.Version = policyVersion(s.Policies)
	s.LoadedAt = now
	return s
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
func (s *Service) ActivePolicies() PolicySet { return s.rl.set.Load().PolicySet }

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
	cfg := s.rl.cfg
	cfg.Policies = ps
	if err := cfg.Validate(); err != nil {
		return s.ActivePolicies(), false, err
	}
	s.rl.swapMu.Lock()
	defer s.rl.swapMu.Unlock()
	old := s.rl.set.Load()
	next := s.rl.newPolicySet(ps, time.Now())
	if next.Version == old.Version {
		return old.PolicySet, false, nil
	}
	s.rl.set.Store(next)
	s.views.prune(next)
	for name, p := range old.byName {
		if np, ok := next.byName[name]; !ok {
			s.rl.deleteCounters(name)
		} else {
			s.rl.deleteLimitCounters(p, np)
		}
	}
	// A cached denial was taken under the old limits: ask Redis again.
	s.rl.cache.clear()
	return next.PolicySet, true, nil
}

// decisionCounters are one policy's metrics.
type decisionCounters struct {
	allowed, denied, wouldDeny, failOpen prometheus.Counter
	// limits are the counters of the policy's limits, in its order; a
	// single-limit policy's one limit is named after the policy.
	limits []limitCounters
}

// limitCounters are one limit's metrics; see rateLimiter.limitDecisions
// and rateLimiter.leaseDecisions.
type limitCounters struct {
	name                                string
	allowed, denied, blocked, wouldDeny prometheus.Counter
	leaseLocal, leaseGranted, unleased  prometheus.Counter // nil without a lease
}

// limitResults are the result labels of limitDecisions.
var limitResults = []string{"allowed", "denied", "blocked", "would_deny"}

func (rl *rateLimiter) newCounters(p Policy) *decisionCounters {
	policy := p.Name
	c := &decisionCounters{allowed: rl.decisions.WithLabelValues(policy, "allowed"),
		denied:    rl.decisions.WithLabelValues(policy, "denied"),
		wouldDeny: rl.wouldDeny.WithLabelValues(policy),
		failOpen:  rl.failOpen.WithLabelValues(policy)}
	ls := p.Limits
	if !p.Multi() && policy != InlinePolicyName {
		ls = []NamedLimit{{Name: policy, Limit: p.Limit}}
	}
	for _, l := range ls {
		lc := limitCounters{name: l.Name, allowed: rl.limitDecisions.WithLabelValues(policy, l.Name, "allowed"),
			denied:    rl.limitDecisions.WithLabelValues(policy, l.Name, "denied"),
			blocked:   rl.limitDecisions.WithLabelValues(policy, l.Name, "blocked"),
			wouldDeny: rl.limitDecisions.WithLabelValues(policy, l.Name, "would_deny")}
		if l.Lease > 0 {
			lc.leaseLocal = rl.leaseDecisions.WithLabelValues(policy, l.Name, "local")
			lc.leaseGranted = rl.leaseDecisions.WithLabelValues(policy, l.Name, "granted")
			lc.unleased = rl.leaseDecisions.WithLabelValues(policy, l.Name, "unleased")
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
func (rl *rateLimiter) deleteCounters(policy string) {
	rl.decisions.DeleteLabelValues(policy, "allowed")
	rl.decisions.DeleteLabelValues(policy, "denied")
	rl.wouldDeny.DeleteLabelValues(policy)
	rl.failOpen.DeleteLabelValues(policy)
	rl.limitDecisions.DeletePartialMatch(prometheus.Labels{"policy": policy})
	rl.leaseDecisions.DeletePartialMatch(prometheus.Labels{"policy": policy})
}

// deleteLimitCounters removes the series of old's limits that next, the
// same policy in a new set, no longer has (or no longer leases).
func (rl *rateLimiter) deleteLimitCounters(old, next Policy) {
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
				rl.limitDecisions.DeleteLabelValues(old.Name, l.Name, r)
			}
		}
		if i < 0 || nl[i].Lease == 0 {
			rl.leaseDecisions.DeleteLabelValues(old.Name, l.Name, "local")
			rl.leaseDecisions.DeleteLabelValues(old.Name, l.Name, "granted")
			rl.leaseDecisions.DeleteLabelValues(old.Name, l.Name, "unleased")
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
func (rl *rateLimiter) countersFor(set *policySet, p Policy) *decisionCounters {
	if p.Name == InlinePolicyName {
		return rl.inline
	}
	if c, ok := set.counters[p.Name]; ok {
		return c
	}
	if c, ok := rl.set.Load().counters[p.Name]; ok {
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
