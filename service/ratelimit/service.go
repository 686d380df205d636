// Package ratelimit is Latchkey's rate-limit decisions: policies, the
// algorithms' scripts, the batcher that sends concurrent decisions together
// and the in-process cache of denied keys.
package ratelimit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Service decides rate limits in Redis: its policies, the cache of denied
// keys, the units held of leased limits and the metrics.
type Service struct {
	st     *store.Store
	prefix string // the store's key prefix
	cfg    Config // its Policies are the first set's; set holds the active one
	// set is the active policy set, replaced whole by SetPolicies (under
	// swapMu) and read once per decision.
	set     atomic.Pointer[policySet]
	swapMu  sync.Mutex
	cache   *denyCache
	views   *views       // what this instance saw of its decisions (stats.go)
	lastLog atomic.Int64 // unix nanoseconds of the last fail-open warning
	// redisClockAhead is how far the Redis clock was ahead of this
	// instance's when a script last said so, in nanoseconds: the calendar
	// windows' periods are computed from the Redis clock (periodCall).
	redisClockAhead atomic.Int64

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
	leases         leaseTable // the units held of leased limits
	// buckets are the policies' bucket hash tags on a Redis Cluster; nil
	// on a single node.
	buckets *bucketCache
	inline  *decisionCounters // the counters of inline limits
	// batchers send concurrent decisions together, one per algorithm; nil
	// when Batch is 1.
	batchers map[Algorithm]*decisionBatcher
	// multi sends concurrent decisions of multi-limit policies together
	// (ratelimit_multi_batch.lua); nil when Batch is 1.
	multi     *decisionBatcher
	cacheHits prometheus.Counter
	failOpen  *prometheus.CounterVec // policy
	wouldDeny *prometheus.CounterVec // policy
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
	cfg = cfg.withDefaults()
	s := &Service{st: st, prefix: st.Config().KeyPrefix, cfg: cfg, cache: newDenyCache(cfg.CacheSize)}
	if st.Config().Cluster {
		s.buckets = &bucketCache{buckets: cfg.ClusterBuckets}
	}
	s.newMetrics()
	s.set.Store(s.newPolicySet(cfg.Policies, time.Now()))
	s.views = newViews(s, cfg.Registerer)
	s.inline = s.newCounters(Policy{Name: InlinePolicyName})
	if cfg.Batch > 1 {
		// On a Redis Cluster a batch is split by hash slot (slotGroups):
		// one call per bucket of the batch's keys.
		s.batchers = map[Algorithm]*decisionBatcher{}
		for alg, sc := range limitScripts {
			s.batchers[alg] = newDecisionBatcher(s, sc, cfg)
		}
		// A multi-limit decision's keys share one hash tag (multiKey): it
		// goes in its slot's call whole.
		s.multi = newDecisionBatcher(s, rateLimitMultiBatchScript, cfg)
	}
	st.Register(scripts...)
	return s, nil
}

// newMetrics makes the Service's metrics and registers them with
// cfg.Registerer, if set.
func (s *Service) newMetrics() {
	s.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchkey_ratelimit_decisions_total", Help: "Rate-limit decisions by policy and result (allowed, denied).",
	}, []string{"policy", "result"})
	s.limitDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchkey_ratelimit_limit_decisions_total",
		Help: "Decisions of each limit of every policy (a single-limit policy's limit is named after it) by policy, limit and result (allowed: counted; denied: this limit denied; blocked: this limit allowed but another denied, so nothing was counted; would_deny: a shadow limit or policy would have denied).",
	}, []string{"policy", "limit", "result"})
	s.leaseDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchkey_ratelimit_lease_decisions_total",
		Help: "Allowed decisions of leased limits by policy, limit and source (local: answered from the units this instance holds, without Redis; granted: counted in Redis with a new lease; unleased: counted in Redis without a lease, as the instance's table of leases was full).",
	}, []string{"policy", "limit", "source"})
	s.cacheHits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "latchkey_ratelimit_cache_hits_total", Help: "Denials answered from the in-process cache without Redis.",
	})
	s.failOpen = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchkey_ratelimit_fail_open_total", Help: "Requests allowed unchecked because Redis was unreachable, by policy.",
	}, []string{"policy"})
	s.wouldDeny = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchkey_ratelimit_shadow_would_deny_total", Help: "Requests allowed that a shadow policy, or a shadow limit of the policy, would have denied, by policy.",
	}, []string{"policy"})
	if reg := s.cfg.Registerer; reg != nil {
		leasePools := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "latchkey_ratelimit_lease_pools",
			Help: fmt.Sprintf("Keys of leased limits whose units this instance keeps (at most %d).", MaxLeasePools),
		}, func() float64 { return float64(s.leases.len()) })
		reg.MustRegister(s.decisions, s.limitDecisions, s.leaseDecisions, s.cacheHits, s.failOpen, s.wouldDeny, leasePools)
	}
}

func invalid(field, rule, format string, args ...any) error {
	return store.Invalid(field, rule, format, args...)
}
