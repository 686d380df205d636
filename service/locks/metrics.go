package locks

import "github.com/prometheus/client_golang/prometheus"

// metrics are the service's Prometheus collectors.
type metrics struct {
	grants        *prometheus.CounterVec // kind: new, reentrant
	conflicts     prometheus.Counter
	releases      *prometheus.CounterVec // kind: partial, final, forced
	subscriptions prometheus.Gauge       // lock channels subscribed
	listeners     prometheus.Gauge       // waiters and hold streams listening
	resubscribes  prometheus.Counter     // re-subscriptions after the pub/sub connection came back
	waits         *prometheus.CounterVec // outcome: acquired, timeout, canceled, conflict, error
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
		subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "latchkey_pubsub_channels", Help: "Lock channels this process is subscribed to for its waiters.",
		}),
		listeners: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "latchkey_lock_listeners", Help: "Waiters and hold streams of this process listening for wake-ups.",
		}),
		resubscribes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "latchkey_pubsub_resubscribes_total", Help: "Channels subscribed again after the pub/sub connection was re-established.",
		}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_lock_waits_total", Help: "Acquires that waited, by outcome (acquired, timeout, canceled, conflict, error).",
		}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.grants, m.conflicts, m.releases,
			m.subscriptions, m.listeners, m.resubscribes, m.waits)
	}
	return m
}
