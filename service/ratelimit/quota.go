package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// refund gives -req.Cost units back to the limits of a decision under pol
// on keys, as ratelimit_refund.lua does: each counter down by the units,
// never below zero, its window ending when it would have. The answer is
// allowed, with what each limit has left after the refund. Only fixed
// windows (calendar ones too) take refunds: a sliding window's and a token
// bucket's state is not a count of units. Returns a *ValidationError for
// another algorithm or more units than the smallest limit, or the store's
// error.
func (s *Service) refund(ctx context.Context, pol Policy, sp limitSpec, keys keyList, req Request) (Decision, error) {
	units := -req.Cost
	if req.Peek {
		return Decision{}, invalid("peek", "excluded", "peek and a negative cost (a refund) exclude each other")
	}
	for _, l := range sp.limits {
		if l.Algorithm != FixedWindow {
			return Decision{}, invalid("cost", "min", "a negative cost (a refund) applies to fixed_window limits only, and %s is a %s", l.Name, l.Algorithm)
		}
	}
	if most := pol.maxCost(); units > most {
		return Decision{}, invalid("cost", "min", "cost must be at least -%d (give back at most what the smallest limit holds), got %d", most, req.Cost)
	}
	rkeys := s.redisKeysOf(ctx, pol, keys).all()
	argv := make([]any, 1+2*len(rkeys))
	argv[0] = units // ARGV[1] units to give back
	for i := range rkeys {
		argv[1+2*i], argv[2+2*i] = "", "" // ARGV[2i], ARGV[2i+1]: no calendar period
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	res, at, err := s.periodCall(ctx, rateLimitRefundScript, sp.limits, rkeys, argv, func(argv []any, i int, start, end int64) {
		argv[1+2*i], argv[2+2*i] = start, end // ARGV[2i], ARGV[2i+1]: the period
	})
	if err != nil {
		return Decision{}, err
	}
	for i, l := range sp.limits {
		s.cache.forget(denyKey{key: rkeys[i], limit: l.Limit.Limit, burst: l.Burst})
	}
	arr, _ := res.([]any)
	v := make([]int64, 2*len(rkeys))
	if len(arr) != len(v) {
		return Decision{}, fmt.Errorf("%s: unexpected reply %v", rateLimitRefundScript.Name(), arr)
	}
	if i, ok := store.FillInt64s(arr, v); !ok {
		return Decision{}, fmt.Errorf("%s: reply[%d] is %T, want int64", rateLimitRefundScript.Name(), i, arr[i])
	}
	lds := make([]LimitDecision, len(sp.limits))
	for i, l := range sp.limits {
		lds[i] = LimitDecision{Name: l.Name, Key: keys.at(i), Limit: l.Limit.Limit, Window: l.Window, Allowed: true,
			Remaining: l.Limit.Limit - v[2*i], ResetAfter: time.Duration(max(v[2*i+1], 0)) * time.Millisecond}
		if l.Calendar != nil {
			start, end := l.Calendar.Bounds(at)
			lds[i].Window = end.Sub(start)
		}
	}
	d := Decision{Policy: pol.Name, Allowed: true}
	if pol.Multi() {
		d.Limits = lds
	}
	return bind(d, lds), nil
}

// ResetKey deletes the counters of key under the named policy, in the
// namespace of the tenant ctx acts for, as ratelimit_reset.lua does: every
// limit whose key the request's key is (a "const" limit's is ConstKey)
// starts afresh, whatever its algorithm; a calendar window's counter of
// the period now. This instance's cached denials of the key are dropped;
// another instance's end when they would have (at most the time the
// denial said to wait). It reports how many counters there were. Returns
// a *PolicyNotFoundError (ErrNotFound), a *ValidationError for a
// malformed name or key, or the store's error.
func (s *Service) ResetKey(ctx context.Context, policy, key string) (int64, error) {
	pol, err := s.Policy(policy)
	if err != nil {
		return 0, err
	}
	keys, err := limitKeys(pol, Request{Key: key})
	if err != nil {
		return 0, err
	}
	sp := s.set.Load().spec(pol)
	all := s.redisKeysOf(ctx, pol, keys).all()
	var limits []NamedLimit
	var rkeys []string
	for i, l := range sp.limits {
		if keys.at(i) == key {
			limits, rkeys = append(limits, l), append(rkeys, all[i])
		}
	}
	if len(rkeys) == 0 {
		return 0, nil
	}
	argv := make([]any, 2*len(rkeys))
	for i := range argv {
		argv[i] = "" // ARGV[2i-1], ARGV[2i]: no calendar period
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	res, _, err := s.periodCall(ctx, rateLimitResetScript, limits, rkeys, argv, func(argv []any, i int, start, end int64) {
		argv[2*i], argv[2*i+1] = start, end // ARGV[2i-1], ARGV[2i]: the period
	})
	if err != nil {
		return 0, err
	}
	for i, l := range limits {
		s.cache.forget(denyKey{key: rkeys[i], limit: l.Limit.Limit, burst: l.Burst})
	}
	arr, _ := res.([]any)
	if len(arr) != 1 {
		return 0, fmt.Errorf("%s: unexpected reply %v", rateLimitResetScript.Name(), arr)
	}
	n, ok := arr[0].(int64)
	if !ok {
		return 0, fmt.Errorf("%s: reply[0] is %T, want int64", rateLimitResetScript.Name(), arr[0])
	}
	return n, nil
}

// redisKeysOf is the Redis keys of a decision under pol on keys, in the
// namespace of the tenant ctx acts for, as decide names them.
func (s *Service) redisKeysOf(ctx context.Context, pol Policy, keys keyList) keyList {
	return redisKeys(store.PrefixFor(ctx, s.prefix), s.buckets, pol, keys)
}
