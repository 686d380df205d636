package service

import "github.com/prometheus/client_golang/prometheus"

// metrics are the service's Prometheus collectors.
type metrics struct {
	grants        *prometheus.CounterVec // kind: new, reentrant
	conflicts     prometheus.Counter
	releases      *prometheus.CounterVec // kind: partial, final, forced
	redisErrors   *prometheus.CounterVec // op, kind
	scriptReloads prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_lock_grants_total", Help: "Lock leases granted, by kind (new, reentrant).",
		}, []string{"kind"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "latchkey_lock_conflicts_total", Help: "Acquire attempts refused because another token held the lock.",
		}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_lock_releases_total", Help: "Lock releases, by kind (partial, final, forced).",
		}, []string{"kind"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_redis_errors_total", Help: "Redis calls that failed, by operation and kind (unavailable, script).",
		}, []string{"op", "kind"}),
		scriptReloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "latchkey_script_reloads_total", Help: "Scripts reloaded after Redis answered NOSCRIPT.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.grants, m.conflicts, m.releases, m.redisErrors, m.scriptReloads)
	}
	return m
}
