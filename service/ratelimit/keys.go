package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// keyList is the keys of one decision, one per limit of its policy: one
// key for a single-limit policy, which needs no slice, many otherwise.
type keyList struct {
	one  string
	many []string // nil for a single-limit policy
}

// at returns limit i's key.
func (k keyList) at(i int) string {
	if k.many != nil {
		return k.many[i]
	}
	return k.one
}

// all returns every key as a slice, made for a single-limit policy.
func (k keyList) all() []string {
	if k.many != nil {
		return k.many
	}
	return []string{k.one}
}

// limitKeys returns the keys of req's limits under pol, checked: req.Key
// for a single-limit policy; for a multi-limit one, req.Keys, or, when
// nil, req.Key for every limit but a "const" one, whose key is ConstKey.
// Returns a *ValidationError (ErrInvalid) for a malformed key.
func limitKeys(pol Policy, req Request) (keyList, error) {
	if !pol.Multi() {
		if err := ValidateRateLimitKey("key", req.Key); err != nil {
			return keyList{}, err
		}
		return keyList{one: req.Key}, nil
	}
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
		return keyList{}, fmt.Errorf("ratelimit: policy %s has %d limits, the request %d keys", pol.Name, len(pol.Limits), len(keys))
	}
	for i, k := range keys {
		if err := ValidateRateLimitKey("key", k); err != nil {
			var ve *store.ValidationError
			errors.As(err, &ve)
			return keyList{}, invalid("key", "format", "key of limit %s: %s", pol.Limits[i].Name, ve.Detail)
		}
	}
	return keyList{many: keys}, nil
}

// redisKeys returns the Redis keys of a decision under pol for the keys of
// its limits, under prefix, the key prefix of the tenant it is for; on a
// cluster (buckets set) a single-limit decision's key carries its bucket's
// hash tag.
func redisKeys(prefix string, buckets *bucketCache, pol Policy, keys keyList) keyList {
	if !pol.Multi() {
		return keyList{one: rateLimitKey(prefix, buckets, pol, keys.one)}
	}
	shared := pol.SharedHashTag()
	out := make([]string, len(keys.many))
	for i, k := range keys.many {
		out[i] = multiKey(prefix, pol, shared, i, k)
	}
	return keyList{many: out}
}

// rateLimitKey is the one Redis key of a single-limit decision. Inline
// limits include their window, so different windows over the same key
// never share a counter. On a cluster the key carries the hash tag of its
// bucket under the policy (see DefaultClusterBuckets; every inline limit's under
// InlinePolicyName), <prefix>rl:<code>:{rl:<policy>:<label>}:<name>:<key>,
// so that concurrent decisions of a bucket share one script call; on a
// single node it carries none.
func rateLimitKey(prefix string, buckets *bucketCache, p Policy, key string) string {
	name := p.Name
	tag := buckets.tag(name, key)
	if name == InlinePolicyName {
		name += ":" + strconv.FormatInt(p.Window.Milliseconds(), 10)
	}
	return prefix + "rl:" + keyCode[p.Algorithm] + ":" + tag + name + ":" + key
}

// periodKey is the Redis key of a calendar window's counter for the period
// starting at start: the limit's key and the period's start in Unix
// seconds, so each period counts afresh and a key never outlives its
// period.
func periodKey(rkey string, start time.Time) string {
	return rkey + ":" + strconv.FormatInt(start.Unix(), 10)
}

// keyCode names each algorithm in its keys. Short codes keep a typical key
// name (prefix, policy, an IPv4 or IPv6 /64 client) in a small allocation:
// a rate-limit key stays under 100 bytes of Redis memory.
var keyCode = map[Algorithm]string{FixedWindow: "fw", SlidingWindow: "sw", TokenBucket: "tb"}

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
// of its limits, in the policy's order, in the shared namespace: a
// single-limit policy has one.
func (s *Service) Keys(pol Policy, keys []string) []string {
	if !pol.Multi() {
		return redisKeys(s.prefix, s.buckets, pol, keyList{one: keys[0]}).all()
	}
	return s.MultiKeys(pol, keys)
}

// KeysAt returns Keys, with each calendar window's key that of its period
// holding at.
func (s *Service) KeysAt(pol Policy, keys []string, at time.Time) []string {
	out := s.Keys(pol, keys)
	for i, l := range newLimitSpec(pol).limits {
		if l.Calendar != nil {
			start, _ := l.Calendar.Bounds(at)
			out[i] = periodKey(out[i], start)
		}
	}
	return out
}

// MultiKeys returns the Redis keys of a decision under a multi-limit
// policy for the given limit keys, in the policy's order, in the shared
// namespace.
func (s *Service) MultiKeys(pol Policy, keys []string) []string {
	return redisKeys(s.prefix, s.buckets, pol, keyList{many: keys}).many
}

// ValidatePolicyName checks a policy name: 1-64 characters of
// [A-Za-z0-9._-], starting with a letter or digit. Returns a
// *ValidationError otherwise.
func ValidatePolicyName(name string) error {
	if !store.Matches(name, 1, 64, store.IsAlnum, isPolicyNameByte) {
		return invalid("policy", "format", "policy name must be 1-64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit")
	}
	return nil
}

// ValidateRateLimitKey checks a rate-limit key: 1-256 printable ASCII
// characters without spaces, '{' or '}'. Returns a *ValidationError otherwise.
func ValidateRateLimitKey(field, key string) error {
	if !store.Matches(key, 1, 256, isKeyByte, isKeyByte) {
		return invalid(field, "format", "%s must be 1-256 printable ASCII characters without spaces, { or }", field)
	}
	return nil
}
