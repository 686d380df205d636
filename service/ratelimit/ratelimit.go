// Package ratelimit is Latchkey's rate-limit decisions: policies, the
// algorithms' scripts, the batcher that sends concurrent decisions together
// and the in-process cache of denied keys.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Request asks for one rate-limit decision: either a named Policy
// or an Inline limit, for Key, costing Cost units (default 1).
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

func (e *PolicyNotFoundError) Error() string { return "service: no rate-limit policy named " + e.Name }

// Unwrap makes errors.Is(err, ErrNotFound) true.
func (e *PolicyNotFoundError) Unwrap() error { return store.ErrNotFound }

// Service decides rate limits in Redis.
type Service struct {
	st     *store.Store
	prefix string // the store's key prefix
	rl     *rateLimiter
	views  *views // what this instance saw of its decisions (stats.go)
}

// New returns a Service on st and registers its scripts with it. It does no
// I/O; call st.LoadScripts at start-up. Returns an error if cfg is invalid.
func New(st *store.Store, cfg Config) (*Service, error) {
	if st == nil {
		return nil, fmt.Errorf("ratelimit: nil store")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ratelimit: %w", err)
	}
	s := &Service{st: st, prefix: st.Config().KeyPrefix}
	s.rl = newRateLimiter(cfg, cfg.Registerer)
	s.views = newViews(s.rl, cfg.Registerer)
	if s.rl.cfg.Batch > 1 {
		// On a Redis Cluster a batch is split by hash slot (slotGroups).
		s.rl.batchers = map[Algorithm]*decisionBatcher{}
		for alg, sc := range limitScripts {
			s.rl.batchers[alg] = newDecisionBatcher(s, sc, s.rl.cfg)
		}
	}
	st.Register(rateLimitFixedWindowScript, rateLimitSlidingWindowScript, rateLimitTokenBucketScript, rateLimitMultiScript)
	return s, nil
}

func invalid(field, rule, format string, args ...any) error {
	return store.Invalid(field, rule, format, args...)
}

// rateLimiter is the Service's rate-limit state: policies, the cache of
// denied keys and the metrics.
type rateLimiter struct {
	cfg Config // its Policies are the first set's; set holds the active one
	// set is the active policy set, replaced whole by SetPolicies (under
	// swapMu) and read once per decision.
	set     atomic.Pointer[policySet]
	swapMu  sync.Mutex
	cache   *denyCache
	lastLog atomic.Int64 // unix nanoseconds of the last fail-open warning

	decisions *prometheus.CounterVec // policy, result: allowed, denied
	// limitDecisions counts each limit of every policy (a single-limit
	// policy's one limit is named after the policy): policy, limit, result
	// (allowed: counted; denied: this limit denied; blocked: it allowed but
	// another denied; would_deny: a shadow limit or policy would deny).
	limitDecisions *prometheus.CounterVec
	// leaseDecisions counts the allowed decisions of leased limits: policy,
	// limit, source (local: from the units held here; granted: with a new
	// lease from Redis; unleased: counted in Redis without a lease, the
	// lease table being full).
	leaseDecisions *prometheus.CounterVec
	leases         leaseTable        // the units held of leased limits
	inline         *decisionCounters // the counters of inline limits
	// batchers send concurrent decisions together, one per algorithm; nil
	// when Batch is 1 or the client is a Cluster's.
	batchers  map[Algorithm]*decisionBatcher
	cacheHits prometheus.Counter
	failOpen  *prometheus.CounterVec // policy
	wouldDeny *prometheus.CounterVec // policy
}

func newRateLimiter(cfg Config, reg prometheus.Registerer) *rateLimiter {
	cfg = cfg.withDefaults()
	rl := &rateLimiter{cfg: cfg, cache: newDenyCache(cfg.CacheSize),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_ratelimit_decisions_total", Help: "Rate-limit decisions by policy and result (allowed, denied).",
		}, []string{"policy", "result"}),
		limitDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_ratelimit_limit_decisions_total",
			Help: "Decisions of each limit of every policy (a single-limit policy's limit is named after it) by policy, limit and result (allowed: counted; denied: this limit denied; blocked: this limit allowed but another denied, so nothing was counted; would_deny: a shadow limit or policy would have denied).",
		}, []string{"policy", "limit", "result"}),
		leaseDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_ratelimit_lease_decisions_total",
			Help: "Allowed decisions of leased limits by policy, limit and source (local: answered from the units this instance holds, without Redis; granted: counted in Redis with a new lease; unleased: counted in Redis without a lease, as the instance's table of leases was full).",
		}, []string{"policy", "limit", "source"}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "latchkey_ratelimit_cache_hits_total", Help: "Denials answered from the in-process cache without Redis.",
		}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_ratelimit_fail_open_total", Help: "Requests allowed unchecked because Redis was unreachable, by policy.",
		}, []string{"policy"}),
		wouldDeny: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_ratelimit_shadow_would_deny_total", Help: "Requests allowed that a shadow policy, or a shadow limit of the policy, would have denied, by policy.",
		}, []string{"policy"}),
	}
	rl.set.Store(rl.newPolicySet(cfg.Policies, time.Now()))
	rl.inline = rl.newCounters(Policy{Name: InlinePolicyName})
	if reg != nil {
		leasePools := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "latchkey_ratelimit_lease_pools",
			Help: fmt.Sprintf("Keys of leased limits whose units this instance keeps (at most %d).", MaxLeasePools),
		}, func() float64 { return float64(rl.leases.len()) })
		reg.MustRegister(rl.decisions, rl.limitDecisions, rl.leaseDecisions, rl.cacheHits, rl.failOpen, rl.wouldDeny, leasePools)
	}
	return rl
}

// Policy returns the named policy of the active set. Returns a
// *PolicyNotFoundError (ErrNotFound) when there is none, or a
// *ValidationError for a malformed name.
func (s *Service) Policy(name string) (Policy, error) {
	return s.rl.set.Load().policy(name)
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

// decide decides whether req.Key may spend req.Cost under the named
// policy or the inline limit, and counts it when allowed. The Redis call is
// bounded by Config.Timeout; when it fails, a fail-open policy
// answers a Degraded allowed Decision and a fail-closed one an error.
//
// Returns a *ValidationError (ErrInvalid) for a bad key, cost or inline
// limit, or for inline limits when they are disabled; a *PolicyNotFoundError
// (ErrNotFound); an error wrapping ErrUnavailable (fail-closed policies and
// inline limits); or the caller's context error.
func (s *Service) decide(ctx context.Context, req Request) (Decision, error) {
	set := s.rl.set.Load()
	pol, err := s.resolvePolicy(set, req)
	if err != nil {
		return Decision{}, err
	}
	if pol.decidedByLimits() {
		return s.checkLimits(ctx, set, pol, req)
	}
	if err := ValidateRateLimitKey("key", req.Key); err != nil {
		return Decision{}, err
	}
	if req.Cost, err = checkCost(req.Cost, pol.capacity(), "the limit"); err != nil {
		return Decision{}, err
	}
	rkey := s.rateLimitKey(store.PrefixFor(ctx, s.prefix), pol, req.Key)
	ctr := s.rl.countersFor(set, pol)
	d := Decision{Policy: pol.Name, Key: req.Key, Limit: pol.Limit.Limit, Window: pol.Window}
	cacheKey := denyKey{key: rkey, limit: pol.Limit.Limit, burst: pol.Burst}
	now := time.Now()
	if e, ok := s.rl.cache.get(cacheKey, req.Cost, now); ok {
		s.rl.cacheHits.Inc()
		d.Remaining = e.remaining
		d.ResetAfter = max(e.reset.Sub(now), 0)
		d.RetryAfter = max(e.until.Sub(now), time.Millisecond)
		d.Cached = true
		return countSingle(ctr, pol, d), nil
	}

	v, err := s.runLimit(ctx, pol.Limit, rkey, req.Cost)
	if err != nil {
		if !errors.Is(err, store.ErrUnavailable) || pol.Fail == FailClosed {
			return Decision{}, err
		}
		ctr.failOpen.Inc()
		s.logFailOpen(ctx, pol.Name, err)
		d.Allowed, d.Degraded = true, true
		d.Remaining = pol.capacity() - req.Cost
		d.ResetAfter = pol.Window
		return d, nil
	}
	d.Allowed = v[0] == decisionAllowed // else decisionDenied
	d.Remaining = v[1]
	d.ResetAfter = time.Duration(v[2]) * time.Millisecond
	d.RetryAfter = time.Duration(v[3]) * time.Millisecond
	if !d.Allowed {
		s.rl.cache.put(cacheKey, denyEntry{until: now.Add(d.RetryAfter), reset: now.Add(d.ResetAfter),
			cost: req.Cost, remaining: d.Remaining}, now)
	}
	return countSingle(ctr, pol, d), nil
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
	case !s.rl.cfg.AllowInline:
		return Policy{}, invalid("limit", "disabled", "inline limits are disabled on this server: name a configured policy instead")
	}
	l := *req.Inline
	if l.Lease != 0 {
		return Policy{}, invalid("lease", "excluded", "lease is for the policies of the policy file only, not inline limits")
	}
	if l.Algorithm == "" {
		l.Algorithm = FixedWindow
	}
	if err := s.rl.cfg.validateLimit("", l); err != nil {
		return Policy{}, err
	}
	if err := s.rl.cfg.validateInline(l); err != nil {
		return Policy{}, err
	}
	return Policy{Name: InlinePolicyName, Limit: l, Key: "ip", DenyStatus: 429, Fail: FailClosed}, nil
}

// rateLimitKey is the one Redis key of a decision. Inline limits include
// their window, so different windows over the same key never share a counter.
// prefix is the key prefix of the tenant the decision is for.
func (s *Service) rateLimitKey(prefix string, p Policy, key string) string {
	name := p.Name
	if name == InlinePolicyName {
		name += ":" + strconv.FormatInt(p.Window.Milliseconds(), 10)
	}
	return prefix + "rl:" + keyCode[p.Algorithm] + ":" + name + ":" + key
}

// keyCode names each algorithm in its keys. Short codes keep a typical key
// name (prefix, policy, an IPv4 or IPv6 /64 client) in a small allocation:
// a rate-limit key stays under 100 bytes of Redis memory.
var keyCode = map[Algorithm]string{FixedWindow: "fw", SlidingWindow: "sw", TokenBucket: "tb"}

// runLimit decides one request with the algorithm's script, bounded by the
// decision timeout: through the algorithm's batcher, or in a call of its own
// when batching is off. The reply is {allowed, remaining, reset_ms,
// retry_after_ms}.
func (s *Service) runLimit(ctx context.Context, l Limit, key string, cost int64) ([4]int64, error) {
	args, n := requestArgs(l, cost)
	if b := s.rl.batchers[l.Algorithm]; b != nil {
		return b.decide(ctx, key, args[:n]...)
	}
	ctx, cancel := context.WithTimeout(ctx, s.rl.cfg.Timeout)
	defer cancel()
	argv := make([]any, n)
	for i := range argv {
		argv[i] = args[i]
	}
	sc := limitScripts[l.Algorithm]
	res, err := s.st.Run(ctx, sc, []string{key}, argv...)
	if err != nil {
		return [4]int64{}, err
	}
	arr, _ := res.([]any)
	return s.decisionReply(sc, arr)
}

// requestArgs is one request's entries of its algorithm's script ARGV (the
// first n of args), as the scripts' header comments list them.
func requestArgs(l Limit, cost int64) (args [4]int64, n int) {
	if l.Algorithm == TokenBucket {
		return tokenBucketArgs(l, cost), 4
	}
	return windowArgs(l, cost), 3
}

// windowArgs is request i's ARGV of ratelimit_fixed_window.lua and
// ratelimit_sliding_window.lua, which take the same three entries.
func windowArgs(l Limit, cost int64) [4]int64 {
	return [4]int64{
		l.Limit,                 // ARGV[3i-2] limit per window
		l.Window.Milliseconds(), // ARGV[3i-1] window, ms
		cost,                    // ARGV[3i]   cost
	}
}

// tokenBucketArgs is request i's ARGV of ratelimit_token_bucket.lua.
func tokenBucketArgs(l Limit, cost int64) [4]int64 {
	burst := l.Burst
	if burst == 0 {
		burst = l.Limit
	}
	return [4]int64{
		l.Limit,                 // ARGV[4i-3] limit: tokens added per window
		l.Window.Milliseconds(), // ARGV[4i-2] window, ms
		burst,                   // ARGV[4i-1] burst: bucket capacity
		cost,                    // ARGV[4i]   cost
	}
}

// The first entry of each request's four in a rate-limit script's reply.
const (
	decisionAllowed  = 1  // allowed: the cost is counted
	decisionDenied   = 0  // denied: nothing counted
	decisionKeyError = -1 // the key cannot be used; the error's text follows
)

var (
	rateLimitFixedWindowScript   = store.NewScript("ratelimit_fixed_window", lua.RateLimitFixedWindow)
	rateLimitSlidingWindowScript = store.NewScript("ratelimit_sliding_window", lua.RateLimitSlidingWindow)
	rateLimitTokenBucketScript   = store.NewScript("ratelimit_token_bucket", lua.RateLimitTokenBucket)
)

// limitScripts are the rate-limit scripts by algorithm.
var limitScripts = map[Algorithm]*store.Script{
	FixedWindow:   rateLimitFixedWindowScript,
	SlidingWindow: rateLimitSlidingWindowScript,
	TokenBucket:   rateLimitTokenBucketScript,
}

// decisionReply reads one request's four entries of a rate-limit script's
// reply: {allowed, remaining, reset_ms, retry_after_ms}, or -1 and the error
// Redis raised for its key, which is translated and counted as a failed call
// would be.
func (s *Service) decisionReply(sc *store.Script, e []any) ([4]int64, error) {
	v, err, kind := decisionEntries(sc, e)
	s.st.CountErr(sc.Name(), kind)
	return v, err
}

// decisionEntries is decisionReply without counting the error: it also
// returns the error's kind (see translateErr).
func decisionEntries(sc *store.Script, e []any) ([4]int64, error, string) {
	var out [4]int64
	if len(e) != len(out) {
		return out, fmt.Errorf("%s: unexpected reply %v", sc.Name(), e), "script"
	}
	if e[0] == int64(decisionKeyError) {
		msg, _ := e[1].(string)
		err, kind := store.TranslateErr(context.Background(), sc.Name(), scriptError(msg))
		return out, err, kind
	}
	if i, ok := store.FillInt64s(e, out[:]); !ok {
		return out, fmt.Errorf("%s: reply[%d] is %T, want int64", sc.Name(), i, e[i]), "script"
	}
	return out, nil, ""
}

// scriptError is an error Redis raised inside a rate-limit script for one
// request's key (WRONGTYPE, OOM, ...). It is a redis.Error, so translateErr
// tells a transient state from a script error as it does for a whole call.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks the error as Redis's reply (redis.Error).
func (scriptError) RedisError() {}

// logFailOpen warns that a policy failed open, at most once per LogInterval.
func (s *Service) logFailOpen(ctx context.Context, policy string, err error) {
	now := time.Now().UnixNano()
	last := s.rl.lastLog.Load()
	if now-last < int64(s.rl.cfg.LogInterval) || !s.rl.lastLog.CompareAndSwap(last, now) {
		return
	}
	s.rl.cfg.Logger.WarnContext(ctx, "redis unreachable: rate-limit policies fail open (allowing unchecked requests)",
		"policy", policy, "err", err, "next_log_in", s.rl.cfg.LogInterval.String())
}
