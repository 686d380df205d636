package ratelimit

import (
	"context"
	"errors"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// Policy returns the named policy of the active set. Returns a
// *PolicyNotFoundError (ErrNotFound) when there is none, or a
// *ValidationError for a malformed name.
func (s *Service) Policy(name string) (Policy, error) {
	return s.set.Load().policy(name)
}

// Check decides whether req.Key may spend req.Cost under the named
// policy or the inline limit, and counts it when allowed; the decision is
// also counted in this instance's views of the policy (PolicyStats,
// TopDenied and the near-limit counter). With req.Peek it decides and
// counts nothing; a negative req.Cost gives units back (fixed windows
// only) and answers what is left. Neither is counted in the views.
//
// Returns a *ValidationError (ErrInvalid) for a bad key, cost or inline
// limit, for a key or cost req.From cannot give, or for inline limits when
// they are disabled; a *PolicyNotFoundError (ErrNotFound); an error
// wrapping ErrUnavailable (fail-closed policies and inline limits); or the
// caller's context error.
func (s *Service) Check(ctx context.Context, req Request) (Decision, error) {
	d, err := s.decide(ctx, req)
	if err == nil && !req.Peek && req.Cost >= 0 { // a peek or a refund decides nothing
		s.views.record(ctx, d)
	}
	return d, err
}

// Gate decides a request to the gate under the named policy of the active
// set, with the key (or each limit's) and the cost src gives as the policy
// says (see Source), and counts it as Check does. It returns the decision
// and the status the policy answers a denial with (Policy.DenyStatus).
//
// Returns a *ValidationError (ErrInvalid) for a malformed policy name or a
// key or cost src cannot give, naming the client address, header or path;
// a *PolicyNotFoundError (ErrNotFound); an error wrapping ErrUnavailable
// (fail-closed policies); or the caller's context error.
func (s *Service) Gate(ctx context.Context, policy string, src Source) (Decision, int, error) {
	set := s.set.Load()
	pol, err := set.policy(policy)
	if err != nil {
		return Decision{}, 0, err
	}
	keys, err := pol.sourceKeys(src)
	if err != nil {
		return Decision{}, 0, err
	}
	cost, err := pol.sourceCost(src)
	if err != nil {
		return Decision{}, 0, err
	}
	// pol is the set's own: its spec is the set's, built once.
	d, err := s.decideLimits(ctx, set, pol, set.specs[pol.Name], keys, cost, false)
	if err == nil {
		s.views.record(ctx, d)
	}
	return d, pol.DenyStatus, err
}

// decide decides req as Check says, counting it in the policy's metrics
// but not in the views: the policy found (or req.Using, or the inline
// limit built), the request completed from req.From, its keys checked,
// then a refund, or decideLimits.
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
	if req.From != nil && pol.Name != InlinePolicyName {
		if req, err = pol.Complete(req); err != nil {
			return Decision{}, err
		}
	}
	keys, err := limitKeys(pol, req)
	if err != nil {
		return Decision{}, err
	}
	sp := set.spec(pol)
	if req.Cost < 0 {
		return s.refund(ctx, pol, sp, keys, req)
	}
	return s.decideLimits(ctx, set, pol, sp, keys, req.Cost, req.Peek)
}

// decideLimits decides whether keys, the keys of pol's limits (already
// checked), may spend cost under pol, decided as sp says, and counts it
// when allowed, in the policy's metrics of set. The Redis call is bounded
// by Config.Timeout; when it fails, a fail-open policy answers a Degraded
// allowed Decision and a fail-closed one an error.
//
// Every policy is decided here the same way, as a list of limits (one for
// a single-limit policy or an inline limit): allowed only if every enforced
// limit allows, and then counted by every one; a denial counts nothing
// anywhere. How the limits are run (the deny cache, the units held of
// leased limits, the scripts) is run's.
//
// Returns a *ValidationError (ErrInvalid) for a cost above what pol can
// allow, an error wrapping ErrUnavailable (fail-closed policies and inline
// limits), or the caller's context error.
func (s *Service) decideLimits(ctx context.Context, set *policySet, pol Policy, sp limitSpec, keys keyList, cost int64, peek bool) (Decision, error) {
	what := "the limit"
	if pol.Multi() {
		what = "the policy's smallest limit"
	}
	cost, err := checkCost(cost, pol.maxCost(), what)
	if err != nil {
		return Decision{}, err
	}
	ctr := s.countersFor(set, pol)
	// A single-limit decision's answer per limit, and the reply of any
	// decision of one limit, stay on the stack: only a multi-limit
	// policy's answer carries its Limits.
	var one [1]LimitDecision
	var reply [multiReplyPer]int64
	lds, v := one[:], reply[:]
	var multi []LimitDecision
	if pol.Multi() {
		multi = make([]LimitDecision, len(sp.limits))
		lds = multi
		if len(sp.limits) > 1 {
			v = make([]int64, multiReplyPer*len(sp.limits))
		}
	}
	for i, l := range sp.limits {
		lds[i] = LimitDecision{Name: l.Name, Key: keys.at(i), Limit: l.Limit.Limit, Window: l.Window}
	}
	d := Decision{Policy: pol.Name, Limits: multi}
	takes, at, cached, err := s.run(ctx, ctr, sp, redisKeys(store.PrefixFor(ctx, s.prefix), s.buckets, pol, keys), cost, v, peek)
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
		if !peek {
			ctr.countLimit(i, ld.Name, status)
		}
	}
	d.Cached = cached && !d.Allowed
	if peek {
		return peeked(pol, bind(d, lds)), nil
	}
	return count(ctr, pol, bind(d, lds)), nil
}

// run runs the limits of one decision under sp, costing cost, on their
// Redis keys rkeys, and writes each limit's answer into v as
// ratelimit_multi.lua's reply has it (multiReplyPer entries per limit,
// status first). One unleased limit is decided here by its algorithm's
// script, through the batcher, and a single-limit policy's denial is
// cached, so a repeated request is denied without Redis (cached reports
// such an answer); several limits, none leased and no calendar window, by
// ratelimit_multi_batch.lua through the multi batcher (run.go); a leased
// limit, or a calendar window, by the units this instance holds, else by
// ratelimit_multi.lua, one call per decision (run.go). A peek is always
// decided by ratelimit_multi.lua, which then writes nothing, and takes no
// lease. takes are the leased limits' takes, settled and
// unpinned; at is the instant the calendar windows' periods were computed
// for. Returns the store's error when Redis could not decide.
func (s *Service) run(ctx context.Context, ctr *decisionCounters, sp limitSpec, rkeys keyList, cost int64, v []int64, peek bool) (takes []leaseTake, at time.Time, cached bool, err error) {
	if sp.one && !peek {
		cached, err = s.runOne(ctx, sp, rkeys.at(0), cost, v)
		return nil, at, cached, err
	}
	if sp.batch && !peek && s.multi != nil {
		return nil, at, false, s.runBatched(ctx, sp, rkeys.many, cost, v)
	}
	if !peek {
		if takes, ok := s.fromLeases(ctr, sp, rkeys, cost, v); ok {
			return takes, at, false, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	takes, at, err = s.runLimits(ctx, ctr, sp, rkeys.all(), cost, v, peek)
	return takes, at, false, err
}

// runOne decides sp's one unleased limit on rkey: from the cache of denied
// keys when sp.cache and it holds a denial of rkey, else with the limit's
// algorithm's script.
func (s *Service) runOne(ctx context.Context, sp limitSpec, rkey string, cost int64, v []int64) (cached bool, err error) {
	l := sp.limits[0]
	denied := int64(multiDenied)
	if l.Shadow {
		denied = multiWouldDeny
	}
	ck := denyKey{key: rkey, limit: l.Limit.Limit, burst: l.Burst}
	now := time.Now()
	if sp.cache {
		if e, ok := s.cache.get(ck, cost, now); ok {
			s.cacheHits.Inc()
			v[0], v[1] = denied, e.remaining
			v[2] = ceilMillis(max(e.reset.Sub(now), 0))
			v[3] = ceilMillis(max(e.until.Sub(now), time.Millisecond))
			return true, nil
		}
	}
	r, err := s.runLimit(ctx, sp, rkey, cost)
	if err != nil {
		return false, err
	}
	v[0], v[1], v[2], v[3] = multiCounted, r[1], r[2], r[3]
	if r[0] != decisionAllowed {
		v[0] = denied
		if sp.cache {
			s.cache.put(ck, denyEntry{until: now.Add(time.Duration(r[3]) * time.Millisecond),
				reset: now.Add(time.Duration(r[2]) * time.Millisecond), cost: cost, remaining: r[1]}, now)
		}
	}
	return false, nil
}

// ceilMillis is d in whole milliseconds, rounded up.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// runLimit decides one request under sp's one limit with its algorithm's
// script, bounded by the decision timeout: through the algorithm's batcher,
// or in a call of its own when batching is off. The reply is {allowed,
// remaining, reset_ms, retry_after_ms}.
func (s *Service) runLimit(ctx context.Context, sp limitSpec, key string, cost int64) ([4]int64, error) {
	args, n := sp.argv, sp.nargv
	args[n-1] = cost // ARGV[3i] or ARGV[4i]: the cost, each request's last (requestArgs)
	alg := sp.limits[0].Algorithm
	if b := s.batchers[alg]; b != nil {
		return b.decide(ctx, key, args[:n]...)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	sc := limitScripts[alg]
	res, err := s.st.Run(ctx, sc, []string{key}, append([]any(nil), args[:n]...)...) // a copy: args stays on the stack

	if err != nil {
		return [4]int64{}, err
	}
	arr, _ := res.([]any)
	return s.decisionReply(sc, arr)
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
