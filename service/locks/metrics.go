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
	return &metrics{
		grants:        counterVec(reg, "latchkey_lock_grants_total", "Lock leases granted, by kind (new, reentrant).", "kind"),
		conflicts:     counter(reg, "latchkey_lock_conflicts_total", "Acquire attempts refused because another token held the lock."),
		releases:      counterVec(reg, "latchkey_lock_releases_total", "Lock releases, by kind (partial, final, forced).", "kind"),
		subscriptions: gauge(reg, "latchkey_pubsub_channels", "Lock channels this process is subscribed to for its waiters."),
		listeners:     gauge(reg, "latchkey_lock_listeners", "Waiters and hold streams of this process listening for wake-ups."),
		resubscribes:  counter(reg, "latchkey_pubsub_resubscribes_total", "Channels subscribed again after the pub/sub connection was re-established."),
		waits:         counterVec(reg, "latchkey_lock_waits_total", "Acquires that waited, by outcome (acquired, timeout, canceled, conflict, error).", "outcome"),
	}
}

// keepaliveMetrics are the keep-alive renewer's Prometheus collectors.
type keepaliveMetrics struct {
	renewals prometheus.Counter
	failures *prometheus.CounterVec // reason: expired, force_released, max_hold, heartbeat_missed, store
	tracked  prometheus.Gauge       // set by the sampler (sampler.go)
	lag      prometheus.Histogram
	batches  prometheus.Counter
}

func newKeepaliveMetrics(reg prometheus.Registerer) *keepaliveMetrics {
	m := &keepaliveMetrics{
		renewals: counter(reg, "latchkey_keepalive_renewals_total", "Keep-alive leases renewed by this instance."),
		failures: counterVec(reg, "latchkey_keepalive_renewal_failures_total",
			"Keep-alive renewals that did not renew, by reason (expired, force_released, max_hold, heartbeat_missed, store).", "reason"),
		tracked: gauge(reg, "latchkey_keepalive_leases", "Keep-alive leases in the registry of every instance (every shard on a cluster). Sampled by a walk of the keyspace of at most 2,000 keys a second; as of the last complete walk."),
		lag: registered(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "latchkey_keepalive_renewal_lag_seconds",
			Help:    "How late a keep-alive renewal ran after it fell due.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		})),
		batches: counter(reg, "latchkey_keepalive_batches_total", "Renewal script calls made by this instance."),
	}
	for _, r := range []string{LostExpired, LostForceReleased, LostMaxHold, LostHeartbeatMissed, "store"} {
		m.failures.WithLabelValues(r)
	}
	return m
}

// counter, counterVec and gauge make a collector of the package's metrics
// with its name and help (and labels), registered with reg unless reg is
// nil. Registering one twice panics, as prometheus.MustRegister does.
func counter(reg prometheus.Registerer, name, help string) prometheus.Counter {
	return registered(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

func counterVec(reg prometheus.Registerer, name, help string, labels ...string) *prometheus.CounterVec {
	return registered(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

func gauge(reg prometheus.Registerer, name, help string) prometheus.Gauge {
	return registered(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

// registered registers c with reg, unless reg is nil, and returns it.
func registered[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}
