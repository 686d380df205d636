package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
)

var rateLimitMultiScript = store.NewScript("ratelimit_multi", lua.RateLimitMulti)

// The status of one limit in ratelimit_multi.lua's reply.
const (
	multiCounted   = 1 // every enforced limit allowed: counted
	multiDenied    = 0 // this limit denies: nothing counted anywhere
	multiBlocked   = 2 // this limit allows, another denies: nothing counted
	multiWouldDeny = 3 // this shadow limit denies: not counted, blocks nothing
)

// multiReplyPer is the entries per limit of ratelimit_multi.lua's reply.
const multiReplyPer = 5

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

// checkLimits decides req under pol in one ratelimit_multi.lua call, or
// none when leases cover it: pol is a multi-limit policy, or a leased
// single-limit one taken as one limit. Allowed only if every enforced limit
// allows, and then counted by every one; a denial counts nothing anywhere.
// Denials are not cached (a leased limit's pool remembers its own) and
// decisions are not batched: the call names several keys.
func (s *Service) checkLimits(ctx context.Context, set *policySet, pol Policy, req Request) (Decision, error) {
	var keys, rkeys []string
	var err error
	if pol.Multi() {
		if keys, err = multiKeys(pol, req); err != nil {
			return Decision{}, err
		}
		rkeys = s.multiKeys(store.PrefixFor(ctx, s.prefix), pol, keys)
	} else {
		if err := ValidateRateLimitKey("key", req.Key); err != nil {
			return Decision{}, err
		}
		keys, rkeys = []string{req.Key}, []string{s.rateLimitKey(store.PrefixFor(ctx, s.prefix), pol, req.Key)}
	}
	what := "the policy's smallest limit"
	if !pol.Multi() {
		what = "the limit"
	}
	cost, err := checkCost(req.Cost, pol.maxCost(), what)
	if err != nil {
		return Decision{}, err
	}
	sp := set.spec(pol)
	ctr := s.rl.countersFor(set, pol)
	d := Decision{Policy: pol.Name, Limits: make([]LimitDecision, len(sp.limits))}
	for i, l := range sp.limits {
		d.Limits[i] = LimitDecision{Name: l.Name, Key: keys[i], Limit: l.Limit.Limit, Window: l.Window}
	}
	v, takes := s.fromLeases(ctr, sp, rkeys, cost)
	if v == nil {
		ctx, cancel := context.WithTimeout(ctx, s.rl.cfg.Timeout)
		defer cancel()
		v, takes, err = s.runLimits(ctx, ctr, sp, rkeys, cost)
	}
	if err != nil {
		if !errors.Is(err, store.ErrUnavailable) || pol.Fail == FailClosed {
			return Decision{}, err
		}
		ctr.failOpen.Inc()
		s.logFailOpen(ctx, pol.Name, err)
		for i, l := range sp.limits {
			ld := &d.Limits[i]
			ld.Allowed, ld.Remaining, ld.ResetAfter = true, l.capacity()-cost, l.Window
		}
		d.Allowed, d.Degraded = true, true
		return single(pol, bind(d)), nil
	}
	d.Allowed = true
	for i := range d.Limits {
		ld := &d.Limits[i]
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
		ctr.countLimit(i, ld.Name, status)
	}
	return count(ctr, pol, single(pol, bind(d))), nil
}

// single makes the one-limit answer of a leased single-limit policy look
// like any single-limit policy's; a multi-limit policy's is unchanged.
func single(pol Policy, d Decision) Decision {
	if !pol.Multi() {
		d.Limits, d.Binding = nil, ""
	}
	return d
}

// bind fills in the Decision's own fields from its binding limit: on a
// denial the denying limit that frees up last (ties: the least remaining),
// with RetryAfter the latest of the denying limits'; when allowed, the limit
// with the least remaining (ties: the one that resets last), which may be
// a shadow limit that would deny.
func bind(d Decision) Decision {
	b := -1
	for i, l := range d.Limits {
		if !d.Allowed && l.Allowed {
			continue
		}
		if b < 0 {
			b = i
			continue
		}
		cur := d.Limits[b]
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
	l := d.Limits[b]
	d.Binding, d.Key, d.Limit, d.Window = l.Name, l.Key, l.Limit, l.Window
	d.Remaining, d.ResetAfter, d.RetryAfter = l.Remaining, l.ResetAfter, l.RetryAfter
	if d.Allowed {
		d.RetryAfter = 0 // a shadow limit's would-deny binds, but allows
	}
	return d
}

// multiKeys returns the keys of req's limits under pol, checked.
func multiKeys(pol Policy, req Request) ([]string, error) {
	keys := req.Keys
	if keys == nil {
		keys = make([]string, len(pol.Limits))
		for i, l := range pol.Limits {
			keys[i] = req.Key
			if l.Key == KeyConst {
				keys[i] = ConstKey
			}
		}
	}
	if len(keys) != len(pol.Limits) {
		return nil, fmt.Errorf("ratelimit: policy %s has %d limits, the request %d keys", pol.Name, len(pol.Limits), len(keys))
	}
	for i, k := range keys {
		if err := ValidateRateLimitKey("key", k); err != nil {
			var ve *store.ValidationError
			errors.As(err, &ve)
			return nil, invalid("key", "format", "key of limit %s: %s", pol.Limits[i].Name, ve.Detail)
		}
	}
	return keys, nil
}

// SharedHashTag reports whether every limit of a multi-limit policy takes
// its key from the same source, so the keys of one decision can share a
// hash tag of the policy and the request's key (spread over a Cluster's
// slots by key). Otherwise their hash tag is the policy's name: every key
// of the policy is in one slot.
func (p Policy) SharedHashTag() bool {
	for _, l := range p.Limits[1:] {
		if l.Key != p.Limits[0].Key {
			return false
		}
	}
	return true
}

// multiKey is the Redis key of limit i of a multi-limit decision. Every
// key of one decision has the same hash tag (see SharedHashTag), and each
// names its limit, so two limits never share a counter, and its algorithm,
// so a limit whose algorithm changes starts afresh.
func multiKey(prefix string, pol Policy, shared bool, i int, key string) string {
	l := pol.Limits[i]
	if shared {
		return prefix + "rl:{" + pol.Name + ":" + key + "}:" + l.Name + ":" + keyCode[l.Algorithm]
	}
	return prefix + "rl:{" + pol.Name + "}:" + l.Name + ":" + keyCode[l.Algorithm] + ":" + key
}

// Keys returns the Redis keys of a decision under pol for the given keys
// of its limits, in the policy's order: a single-limit policy has one.
func (s *Service) Keys(pol Policy, keys []string) []string {
	if !pol.Multi() {
		return []string{s.rateLimitKey(s.prefix, pol, keys[0])}
	}
	return s.MultiKeys(pol, keys)
}

// MultiKeys returns the Redis keys of a decision under a multi-limit
// policy for the given limit keys, in the policy's order, in the shared
// namespace.
func (s *Service) MultiKeys(pol Policy, keys []string) []string {
	return s.multiKeys(s.prefix, pol, keys)
}

// multiKeys is MultiKeys under a tenant's key prefix.
func (s *Service) multiKeys(prefix string, pol Policy, keys []string) []string {
	shared := pol.SharedHashTag()
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = multiKey(prefix, pol, shared, i, k)
	}
	return out
}

// limitSpec is how a policy is decided by ratelimit_multi.lua: its limits
// (a leased single-limit policy's one limit, named after the policy) and
// their ARGV entries after the cost and the leases held.
type limitSpec struct {
	limits    []NamedLimit
	args      []any
	leased    bool // a limit has a lease
	allLeased bool // every limit has one
}

// newLimitSpec builds pol's spec.
func newLimitSpec(pol Policy) limitSpec {
	ls := pol.Limits
	if !pol.Multi() {
		// A shadow policy's one limit is a shadow limit: the same answer.
		ls = []NamedLimit{{Name: pol.Name, Limit: pol.Limit, Key: pol.Key, Shadow: pol.Shadow}}
	}
	sp := limitSpec{limits: ls, args: make([]any, 0, 5*len(ls)), allLeased: true}
	for _, l := range ls {
		extra := l.Burst // tb: the burst
		if l.Algorithm == TokenBucket && extra == 0 {
			extra = l.Limit.Limit
		} else if l.Algorithm == FixedWindow {
			extra = l.Lease // fw: the lease
		}
		shadow := 0
		if l.Shadow {
			shadow = 1
		}
		sp.leased = sp.leased || l.Lease > 0
		sp.allLeased = sp.allLeased && l.Lease > 0
		sp.args = append(sp.args,
			keyCode[l.Algorithm],    // ARGV[n+5i-3] algorithm
			l.Limit.Limit,           // ARGV[n+5i-2] limit
			l.Window.Milliseconds(), // ARGV[n+5i-1] window, ms
			extra,                   // ARGV[n+5i]   burst (tb) or lease (fw)
			shadow)                  // ARGV[n+5i+1] shadow
	}
	return sp
}

// decidedByLimits reports whether pol is decided by ratelimit_multi.lua:
// a multi-limit policy, or a leased single-limit one.
func (p Policy) decidedByLimits() bool { return p.Multi() || p.Lease > 0 }

// spec returns pol's spec: the set's, built once, when pol is the set's
// policy itself (a multi-limit policy's limits the same array), as a
// looked-up policy is; else built now.
func (set *policySet) spec(pol Policy) limitSpec {
	sp, ok := set.specs[pol.Name]
	if cur := set.byName[pol.Name]; ok && (pol.Multi() && len(cur.Limits) == len(pol.Limits) && &cur.Limits[0] == &pol.Limits[0] ||
		!pol.Multi() && !cur.Multi() && cur.Limit == pol.Limit && cur.Key == pol.Key) {
		return sp
	}
	return newLimitSpec(pol)
}

// runLimits runs ratelimit_multi.lua for one decision under sp, bounded
// by ctx, taking the units of leased limits from their pools first; when
// the pools cover every limit it answers without a call. A leased limit
// that gets no pool (the table is full) is asked of Redis without a lease.
// The reply is multiReplyPer entries per limit; takes are the leased
// limits' takes (zero for the others), already settled and unpinned.
func (s *Service) runLimits(ctx context.Context, ctr *decisionCounters, sp limitSpec, rkeys []string, cost int64) ([]int64, []leaseTake, error) {
	n := len(sp.limits)
	out := make([]int64, multiReplyPer*n)
	var takes []leaseTake
	local, unleased := 0, false
	t0 := time.Now()
	if sp.leased {
		takes = make([]leaseTake, n)
		defer unpinTakes(takes)
		for i, l := range sp.limits {
			if l.Lease == 0 {
				continue
			}
			p := s.rl.leases.pool(rkeys[i], t0)
			if p == nil {
				unleased = true
				continue
			}
			t, err := p.reserve(ctx, cost, t0)
			if err != nil {
				p.unpin()
				undoTakes(takes[:i])
				return nil, nil, fmt.Errorf("%s: %w", rateLimitMultiScript.Name(), errors.Join(store.ErrUnavailable, err))
			}
			takes[i] = t
			if t.have >= cost {
				local++
			}
			if t.dry && n == 1 && !l.Shadow {
				// Redis cannot cover it before dryUntil: denied here. (A
				// limit among others asks Redis, which denies it, so the
				// answer reports every limit.)
				p.mu.Lock()
				avail, wait := p.avail+p.unitsAt(t0), p.dryUntil.Sub(t0).Milliseconds()
				p.mu.Unlock()
				out[0], out[1], out[2], out[3] = multiDenied, avail, wait, wait+1
				return out, make([]leaseTake, n), nil
			}
		}
		if local == n {
			for i := range n {
				out[multiReplyPer*i], out[multiReplyPer*i+1], out[multiReplyPer*i+2] = multiCounted, -1, -1
			}
			for i := range n {
				ctr.lease(i, sp.limits[i].Name, "local")
			}
			return out, takes, nil
		}
	}
	argv := make([]any, 1+n, 1+n+len(sp.args))
	argv[0] = cost // ARGV[1] cost
	for i := range n {
		argv[1+i] = int64(0) // ARGV[1+i] units held from a lease
		if takes != nil {
			argv[1+i] = takes[i].have
		}
	}
	argv = append(argv, sp.args...)
	if unleased {
		for i, l := range sp.limits {
			if l.Lease > 0 && takes[i].pool == nil {
				argv[1+n+5*i+3] = int64(0) // ARGV[n+5i] lease: none, as it has no pool
			}
		}
	}
	sc := rateLimitMultiScript
	res, err := s.st.Run(ctx, sc, rkeys, argv...)
	if err == nil {
		arr, _ := res.([]any)
		if len(arr) != len(out) {
			err = fmt.Errorf("%s: unexpected reply %v", sc.Name(), arr)
		} else if i, ok := store.FillInt64s(arr, out); !ok {
			err = fmt.Errorf("%s: reply[%d] is %T, want int64", sc.Name(), i, arr[i])
		}
		if err != nil {
			s.st.CountErr(sc.Name(), "script")
		}
	}
	if err != nil {
		undoTakes(takes)
		return nil, nil, err
	}
	for i, t := range takes {
		o := multiReplyPer * i
		status, remaining, reset := out[o], out[o+1], time.Duration(out[o+2])*time.Millisecond
		switch {
		case t.pool == nil: // no lease, or no pool for it in a full table
			if status == multiCounted && sp.limits[i].Lease > 0 {
				ctr.lease(i, sp.limits[i].Name, "unleased")
			}
		case status == multiCounted && t.refill:
			t.granted(out[o+4], cost-t.have, remaining, t0.Add(reset), t0)
			ctr.lease(i, sp.limits[i].Name, "granted")
		case status == multiCounted:
			ctr.lease(i, sp.limits[i].Name, "local")
		default:
			t.undo(status == multiDenied || status == multiWouldDeny, remaining, t0.Add(reset))
		}
	}
	return out, takes, nil
}

// fromLeases answers a decision from the units this instance holds when
// every limit of sp is leased and holds the cost: no Redis call, no wait.
// It returns a nil reply otherwise, having taken nothing. The takes
// returned are unpinned.
func (s *Service) fromLeases(ctr *decisionCounters, sp limitSpec, rkeys []string, cost int64) ([]int64, []leaseTake) {
	if !sp.allLeased {
		return nil, nil
	}
	now := time.Now()
	takes := make([]leaseTake, len(sp.limits))
	defer unpinTakes(takes)
	for i := range sp.limits {
		p := s.rl.leases.find(rkeys[i])
		if p == nil {
			undoTakes(takes[:i])
			return nil, nil
		}
		t, ok := p.tryLocal(cost, now)
		if !ok {
			p.unpin()
			undoTakes(takes[:i])
			return nil, nil
		}
		takes[i] = t
	}
	out := make([]int64, multiReplyPer*len(sp.limits))
	for i, l := range sp.limits {
		out[multiReplyPer*i], out[multiReplyPer*i+1], out[multiReplyPer*i+2] = multiCounted, -1, -1
		ctr.lease(i, l.Name, "local")
	}
	return out, takes
}

// undoTakes gives back the units of takes whose decision was not counted.
func undoTakes(takes []leaseTake) {
	for _, t := range takes {
		if t.pool != nil && !t.dry {
			t.undo(false, 0, time.Time{})
		}
	}
}

// unpinTakes unpins the pools of takes, once the decision is settled.
func unpinTakes(takes []leaseTake) {
	for _, t := range takes {
		if t.pool != nil {
			t.pool.unpin()
		}
	}
}
