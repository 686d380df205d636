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
