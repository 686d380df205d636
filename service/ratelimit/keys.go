package ratelimit

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// keyList is the keys of one decision, one per limit of its policy: one
// key for a policy of one limit (a single-limit policy, or a limits: list
// of one), which needs no slice, many otherwise.
type keyList struct {
	one  string
	many []string // nil for a policy of one limit
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
	if keys == nil && len(pol.Limits) == 1 { // one key: no slice
		k := keyOfLimit(pol.Limits[0], req.Key)
		if err := checkLimitKey(pol.Limits[0], k); err != nil {
			return keyList{}, err
		}
		return keyList{one: k}, nil
	}
	if keys == nil {
		keys = make([]string, len(pol.Limits))
		for i, l := range pol.Limits {
			keys[i] = keyOfLimit(l, req.Key)
		}
	}
	if len(keys) != len(pol.Limits) {
		return keyList{}, fmt.Errorf("ratelimit: policy %s has %d limits, the request %d keys", pol.Name, len(pol.Limits), len(keys))
	}
	for i, k := range keys {
		if err := checkLimitKey(pol.Limits[i], k); err != nil {
			return keyList{}, err
		}
	}
	return keyList{many: keys}, nil
}

// keyOfLimit is limit l's key in a request giving key for every limit:
// key, or ConstKey for a "const" limit.
func keyOfLimit(l NamedLimit, key string) string {
	if l.Key == KeyConst {
		return ConstKey
	}
	return key
}

// checkLimitKey checks limit l's key k. Returns a *ValidationError naming
// the limit otherwise.
func checkLimitKey(l NamedLimit, k string) error {
	if err := ValidateRateLimitKey("key", k); err != nil {
		var ve *store.ValidationError
		errors.As(err, &ve)
		return invalid("key", "format", "key of limit %s: %s", l.Name, ve.Detail)
	}
	return nil
}

// Complete returns req, a request under p, completed from its From as
// Check completes it: when req gives no key (Key is "" and Keys nil), the
// key or each limit's from From as p's key spec says (see Source); when
// its Cost is 0, the cost p's cost header gives (see HeaderCost). The
// request returned is decided under p (Using) and has no From. Returns a
// *ValidationError (ErrInvalid) naming the client address, the header or
// the path that gives no valid key or cost.
func (p Policy) Complete(req Request) (Request, error) {
	src := req.From
	req.Using, req.From = p, nil
	if src == nil {
		return req, nil
	}
	if req.Key == "" && req.Keys == nil {
		keys, err := p.sourceKeys(src)
		if err != nil {
			return req, err
		}
		req.Key, req.Keys = keys.one, keys.many
	}
	if req.Cost == 0 {
		cost, err := p.sourceCost(src)
		if err != nil {
			return req, err
		}
		req.Cost = cost
	}
	return req, nil
}

// sourceKeys returns the keys of a decision under p taken from src as p's
// key spec says: a single-limit policy's one key, the client's address or
// a header's value; a multi-limit policy's key of each limit, which may
// also be ConstKey or the gate path's remainder (the client's address is
// found once for all). Returns a *ValidationError (ErrInvalid) naming the
// client address, the header or the path that gives no valid key.
func (p Policy) sourceKeys(src Source) (keyList, error) {
	if !p.Multi() {
		h := p.KeyHeader()
		if h == "" {
			k, err := clientKey(src)
			return keyList{one: k}, err
		}
		k, err := headerKey(src, h)
		if err == nil && k == "" {
			err = invalid(h, "required", "policy %s takes its key from the %s header, which is missing", p.Name, h)
		}
		return keyList{one: k}, err
	}
	// ip is the client's address, found once for all.
	var ip string
	if len(p.Limits) == 1 { // one key: no slice
		k, err := p.limitSourceKey(src, p.Limits[0], &ip)
		return keyList{one: k}, err
	}
	keys := make([]string, len(p.Limits))
	for i, l := range p.Limits {
		var err error
		if keys[i], err = p.limitSourceKey(src, l, &ip); err != nil {
			return keyList{}, err
		}
	}
	return keyList{many: keys}, nil
}

// limitSourceKey is the key of p's limit l taken from src; ip caches the
// client's address for the limits after it. Returns a *ValidationError as
// sourceKeys does.
func (p Policy) limitSourceKey(src Source, l NamedLimit, ip *string) (string, error) {
	switch l.Key {
	case KeyConst:
		return ConstKey, nil
	case KeyIP:
		if *ip == "" {
			k, err := clientKey(src)
			if err != nil {
				return "", err
			}
			*ip = k
		}
		return *ip, nil
	case KeyPath:
		return pathKey(src, p, l)
	}
	h := l.KeyHeader()
	k, err := headerKey(src, h)
	if err == nil && k == "" {
		err = invalid(h, "required", "limit %s of policy %s takes its key from the %s header, which is missing", l.Name, p.Name, h)
	}
	return k, err
}

// clientKey is the client's address of src as a key. Returns a
// *ValidationError naming the client address when src cannot find it.
func clientKey(src Source) (string, error) {
	k, err := src.ClientKey()
	if err != nil {
		return "", invalid("client", "address", "%s", err.Error())
	}
	return k, nil
}

// headerKey is the key src sends in header h, "" when it sends none or an
// empty one. Returns a *ValidationError naming h when it is sent more than
// once (no value of it is picked) or its value is not a valid key.
func headerKey(src Source, h string) (string, error) {
	vs := src.Header(h)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", onceError(h, len(vs))
	}
	if vs[0] == "" {
		return "", nil
	}
	if err := ValidateRateLimitKey(h, vs[0]); err != nil {
		return "", err
	}
	return vs[0], nil
}

// onceError refuses header h, sent n times: every header is read once.
func onceError(h string, n int) error {
	return invalid(h, "once", "the %s header must be sent once, got %d values", h, n)
}

// pathKey is the key limit l of p takes from the gate path's remainder.
// Returns a *ValidationError for a request that is not one to the gate
// (its body must give the key), or naming the path when it has no
// remainder or not a valid key.
func pathKey(src Source, p Policy, l NamedLimit) (string, error) {
	rest, gate := src.GatePath()
	if !gate {
		return "", invalid("key", "required", "limit %s of policy %s takes its key from the gate path (/v1/ratelimit/gate/%s/KEY): give key in the body",
			l.Name, p.Name, p.Name)
	}
	if rest == "" {
		return "", invalid("path", "required", "limit %s of policy %s takes its key from the path after /v1/ratelimit/gate/%s/, which is missing",
			l.Name, p.Name, p.Name)
	}
	if err := ValidateRateLimitKey("path", rest); err != nil {
		return "", err
	}
	return rest, nil
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
	if keys.many == nil { // a limits: list of one
		return keyList{one: multiKey(prefix, pol, shared, 0, keys.one)}
	}
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
	return redisKeys(s.prefix, s.buckets, pol, keyList{many: keys}).all()
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
