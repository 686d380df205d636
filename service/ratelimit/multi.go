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
	multiCounted = 1 // every limit allowed: counted
	multiDenied  = 0 // this limit denies: nothing counted anywhere
	multiBlocked = 2 // this limit allows, another denies: nothing counted
)

// checkMulti decides req under the multi-limit policy pol in one script
// call: allowed only if every limit allows, and then counted by every one;
// a denial counts nothing anywhere. Denials are not cached and decisions
// are not batched: the call names several keys.
func (s *Service) checkMulti(ctx context.Context, set *policySet, pol Policy, req Request) (Decision, error) {
	keys, err := multiKeys(pol, req)
	if err != nil {
		return Decision{}, err
	}
	if req.Cost == 0 {
		req.Cost = 1
	}
	if req.Cost < 0 {
		return Decision{}, invalid("cost", "min", "cost must be at least 1, got %d", req.Cost)
	}
	if c := pol.maxCost(); req.Cost > c {
		return Decision{}, invalid("cost", "max", "cost %d is above what the policy's smallest limit can ever allow at once (%d)", req.Cost, c)
	}
	ctr := s.rl.countersFor(set, pol)
	d := Decision{Policy: pol.Name, Limits: make([]LimitDecision, len(pol.Limits))}
	for i, l := range pol.Limits {
		d.Limits[i] = LimitDecision{Name: l.Name, Key: keys[i], Limit: l.Limit.Limit, Window: l.Window}
	}
	v, err := s.runMulti(ctx, set, pol, keys, req.Cost)
	if err != nil {
		if !errors.Is(err, store.ErrUnavailable) || pol.Fail == FailClosed {
			return Decision{}, err
		}
		ctr.failOpen.Inc()
		s.logFailOpen(ctx, pol.Name, err)
		for i, l := range pol.Limits {
			ld := &d.Limits[i]
			ld.Allowed, ld.Remaining, ld.ResetAfter = true, l.capacity()-req.Cost, l.Window
		}
		d.Allowed, d.Degraded = true, true
		bind(&d)
		return d, nil
	}
	d.Allowed = true
	for i := range d.Limits {
		ld := &d.Limits[i]
		status := v[4*i]
		ld.Allowed = status != multiDenied
		ld.Remaining = v[4*i+1]
		ld.ResetAfter = time.Duration(v[4*i+2]) * time.Millisecond
		ld.RetryAfter = time.Duration(v[4*i+3]) * time.Millisecond
		if status != multiCounted {
			d.Allowed = false
		}
		if i < len(ctr.limits) && ctr.limits[i].name == ld.Name {
			switch status {
			case multiCounted:
				ctr.limits[i].allowed.Inc()
			case multiDenied:
				ctr.limits[i].denied.Inc()
			default:
				ctr.limits[i].blocked.Inc()
			}
		}
	}
	bind(&d)
	return count(ctr, pol, d), nil
}

// bind fills in the Decision's own fields from its binding limit: on a
// denial the denying limit that frees up last (ties: the least remaining),
// with RetryAfter the latest of the denying limits'; when allowed, the limit
// with the least remaining (ties: the one that resets last).
func bind(d *Decision) {
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

// multiArgs are ratelimit_multi.lua's ARGV entries of limits: algorithm,
// limit, window in milliseconds and burst, four per limit.
func multiArgs(ls []NamedLimit) []any {
	args := make([]any, 0, 4*len(ls))
	for _, l := range ls {
		burst := l.Burst
		if burst == 0 {
			burst = l.Limit.Limit
		}
		args = append(args, keyCode[l.Algorithm], l.Limit.Limit, l.Window.Milliseconds(), burst)
	}
	return args
}

// runMulti runs ratelimit_multi.lua for one decision under pol, taken from
// set or from a caller's Request.Using, bounded by the decision timeout. The reply is four entries per limit.
func (s *Service) runMulti(ctx context.Context, set *policySet, pol Policy, keys []string, cost int64) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.rl.cfg.Timeout)
	defer cancel()
	rkeys := s.multiKeys(store.PrefixFor(ctx, s.prefix), pol, keys)
	// The set's arguments are pol's when pol is the set's policy itself
	// (its limits the same array), as a looked-up policy is.
	args, ok := set.args[pol.Name]
	if ls := set.byName[pol.Name].Limits; !ok || len(ls) != len(pol.Limits) || &ls[0] != &pol.Limits[0] {
		args = multiArgs(pol.Limits)
	}
	argv := make([]any, 1, 1+len(args))
	argv[0] = cost
	argv = append(argv, args...)
	sc := rateLimitMultiScript
	res, err := s.st.Run(ctx, sc, rkeys, argv...)
	if err != nil {
		return nil, err
	}
	arr, _ := res.([]any)
	out := make([]int64, 4*len(pol.Limits))
	if len(arr) != len(out) {
		s.st.CountErr(sc.Name(), "script")
		return nil, fmt.Errorf("%s: unexpected reply %v", sc.Name(), arr)
	}
	if i, ok := store.FillInt64s(arr, out); !ok {
		s.st.CountErr(sc.Name(), "script")
		return nil, fmt.Errorf("%s: reply[%d] is %T, want int64", sc.Name(), i, arr[i])
	}
	return out, nil
}
