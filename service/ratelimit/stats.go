package ratelimit

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Counts are the decisions of one tenant's policy counted by this instance:
// Allowed answers (WouldDeny included), Denied ones, and WouldDeny, the
// allowed answers a shadow policy or limit would have denied. A decision
// that failed open is not counted here (see latchkey_ratelimit_fail_open_total).
type Counts struct {
	Allowed, Denied, WouldDeny int64
}

// PolicyStats are one policy's Counts on this instance since it started
// (or since the policy joined the active set) and over the last minute
// (the last 60 to 70 seconds, counted in LastMinuteStep steps).
type PolicyStats struct {
	SinceStart, LastMinute Counts
}

// LastMinuteStep is the step of PolicyStats.LastMinute.
const LastMinuteStep = 10 * time.Second

// minuteSlots are the steps LastMinute adds up: the one under way and the
// six before it.
const minuteSlots = 7

// NearLimitShare is the share of a limit below which what remains after an
// allowed decision counts it as near the limit: 1/5, 20 %.
const NearLimitShare = 5

// views are what this instance saw of the decisions of each tenant's
// policies. An entry is made on a policy's first decision for a tenant and
// dropped when the policy leaves the active set, so there are at most as
// many as tenants times policies, both bounded by configuration.
type views struct {
	svc *Service
	now func() time.Time
	// nearLimit counts the allowed decisions that left less than
	// 1/NearLimitShare of the limit, by policy as decisions are.
	nearLimit  *prometheus.CounterVec
	inlineNear prometheus.Counter
	mu         sync.Mutex // serialises changes of m
	m          atomic.Pointer[map[viewKey]*policyView]
}

// viewKey names one tenant's policy ("" is the shared namespace).
type viewKey struct{ tenant, policy string }

// policyView is what this instance saw of one tenant's policy.
type policyView struct {
	nearLimit prometheus.Counter
	total     counters
	minute    [minuteSlots]atomic.Pointer[slotCounters]
	top       topKeys
}

// counters are Counts kept with atomic additions.
type counters struct {
	allowed, denied, wouldDeny atomic.Int64
}

func (c *counters) counts() Counts {
	return Counts{Allowed: c.allowed.Load(), Denied: c.denied.Load(), WouldDeny: c.wouldDeny.Load()}
}

// slotCounters are the counters of one LastMinuteStep, numbered from the
// Unix epoch.
type slotCounters struct {
	step int64
	counters
}

func newViews(svc *Service, reg prometheus.Registerer) *views {
	v := &views{svc: svc, now: time.Now, nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "latchkey_ratelimit_near_limit_total",
		Help: "Allowed rate-limit decisions that left less than 20 % of the limit, by policy (the binding limit's, for a policy of several limits).",
	}, []string{"policy"})}
	v.inlineNear = v.nearLimit.WithLabelValues(InlinePolicyName)
	v.m.Store(&map[viewKey]*policyView{})
	if reg != nil {
		reg.MustRegister(v.nearLimit)
	}
	return v
}

// record counts d, a decision for the tenant ctx acts for, in its policy's
// view: allowed answers in the counters (and the near-limit counter when
// little is left), denials and would-denials in the counters and the
// sketch of the most-denied keys. Decisions of a policy outside the active
// set (the tenant's request-rate quota) and degraded ones are not counted.
func (v *views) record(ctx context.Context, d Decision) {
	if d.Degraded {
		return
	}
	if d.Policy == InlinePolicyName {
		if near(d) {
			v.inlineNear.Inc()
		}
		return
	}
	pv := v.view(store.TenantOf(ctx), d.Policy)
	if pv == nil {
		return
	}
	now := v.now()
	slot := pv.slot(now)
	switch {
	case !d.Allowed:
		pv.total.denied.Add(1)
		slot.denied.Add(1)
		pv.top.add(d.Key, now)
	case d.WouldDeny:
		pv.total.allowed.Add(1)
		pv.total.wouldDeny.Add(1)
		slot.allowed.Add(1)
		slot.wouldDeny.Add(1)
		pv.top.add(d.Key, now)
	default:
		pv.total.allowed.Add(1)
		slot.allowed.Add(1)
		if near(d) {
			pv.nearLimit.Inc()
		}
	}
}

// near reports whether d, an allowed decision, left less than
// 1/NearLimitShare of its limit.
func near(d Decision) bool {
	return d.Allowed && !d.WouldDeny && d.Remaining*NearLimitShare < d.Limit
}

// view returns the view of tenant's policy, made on its first decision,
// or nil when the policy is not in the active set. The common case, a view
// that exists, is one lookup in an immutable map.
func (v *views) view(tenant, policy string) *policyView {
	k := viewKey{tenant, policy}
	if pv, ok := (*v.m.Load())[k]; ok {
		return pv
	}
	if _, ok := v.svc.set.Load().byName[policy]; !ok {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	m := *v.m.Load()
	if pv, ok := m[k]; ok {
		return pv
	}
	// Checked again under mu: prune may have run since, and must not see
	// a view of a policy it dropped come back.
	if _, ok := v.svc.set.Load().byName[policy]; !ok {
		return nil
	}
	pv := &policyView{nearLimit: v.nearLimit.WithLabelValues(policy)}
	next := maps.Clone(m)
	next[k] = pv
	v.m.Store(&next)
	return pv
}

// lookup returns the view of tenant's policy, nil when there is none yet.
func (v *views) lookup(tenant, policy string) *policyView {
	return (*v.m.Load())[viewKey{tenant, policy}]
}

// prune drops the views of policies no longer in set, and their series of
// the near-limit counter, after set became the active one.
func (v *views) prune(set *policySet) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := *v.m.Load()
	next := make(map[viewKey]*policyView, len(m))
	for k, pv := range m {
		if _, ok := set.byName[k.policy]; ok {
			next[k] = pv
		} else {
			v.nearLimit.DeleteLabelValues(k.policy)
		}
	}
	v.m.Store(&next)
}

// slot returns the counters of the LastMinuteStep under way at now. A slot
// of a step that has passed is replaced by a new one: once per step, not
// per decision.
func (pv *policyView) slot(now time.Time) *counters {
	step := now.Unix() / int64(LastMinuteStep/time.Second)
	p := &pv.minute[step%minuteSlots]
	for {
		c := p.Load()
		if c != nil && c.step >= step { // a clock set back counts in the later step
			return &c.counters
		}
		if p.CompareAndSwap(c, &slotCounters{step: step}) {
			return &p.Load().counters
		}
	}
}

// lastMinute adds up the steps of the last minute as of now.
func (pv *policyView) lastMinute(now time.Time) Counts {
	step := now.Unix() / int64(LastMinuteStep/time.Second)
	var out Counts
	for i := range pv.minute {
		c := pv.minute[i].Load()
		if c == nil || c.step <= step-minuteSlots || c.step > step {
			continue
		}
		n := c.counts()
		out.Allowed += n.Allowed
		out.Denied += n.Denied
		out.WouldDeny += n.WouldDeny
	}
	return out
}

// PolicyStats returns this instance's counts of the decisions taken for the
// tenant ctx acts for, by the name of each policy of the active set; a
// policy without a decision yet has zero counts. Counts of other tenants
// and other instances are not in it.
func (s *Service) PolicyStats(ctx context.Context) map[string]PolicyStats {
	set := s.set.Load()
	tenant := store.TenantOf(ctx)
	now := s.views.now()
	out := make(map[string]PolicyStats, len(set.Policies))
	for _, p := range set.Policies {
		var ps PolicyStats
		if pv := s.views.lookup(tenant, p.Name); pv != nil {
			ps = PolicyStats{SinceStart: pv.total.counts(), LastMinute: pv.lastMinute(now)}
		}
		out[p.Name] = ps
	}
	return out
}

// TopKeys are the keys of a policy denied most on this instance for the
// tenant asked for.
type TopKeys struct {
	Policy string
	// Window is the longest stretch of time the counts cover (see
	// TopKeysPeriod).
	Window time.Duration
	// Items are the keys, most denied first (ties by key). Denied is the
	// number of denials the sketch vouches for: at least that many (and,
	// with no more than TopKeysCapacity keys denied in a period, exactly
	// that many). A would-denial of a shadow policy or limit counts as a
	// denial.
	Items []KeyCount
}

// TopDenied returns at most n of the keys of the named policy denied most
// on this instance for the tenant ctx acts for, in the last TopKeysPeriod
// to TopKeysWindow. The counts come from a fixed-size sketch
// (TopKeysCapacity keys per period): approximate when more keys than that
// were denied, and this instance's only.
//
// Returns a *ValidationError (ErrInvalid) naming "limit" when n is not
// within 1..MaxTopKeys, or naming "policy" for a malformed name, and a
// *PolicyNotFoundError (ErrNotFound) when the active set has no such policy.
func (s *Service) TopDenied(ctx context.Context, policy string, n int) (TopKeys, error) {
	if _, err := s.Policy(policy); err != nil {
		return TopKeys{}, err
	}
	if n < 1 {
		return TopKeys{}, invalid("limit", "min", "limit must be at least 1, got %d", n)
	}
	if n > MaxTopKeys {
		return TopKeys{}, invalid("limit", "max", "limit must be at most %d, got %d", MaxTopKeys, n)
	}
	out := TopKeys{Policy: policy, Window: TopKeysWindow, Items: []KeyCount{}}
	if pv := s.views.lookup(store.TenantOf(ctx), policy); pv != nil {
		out.Items = pv.top.top(s.views.now(), n)
	}
	return out, nil
}
