package ratelimit

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures rate-limit decisions. Zero values fall back to
// the defaults below.
type Config struct {
	// Policies are the named policies (from the policy file and the default
	// per-IP policy). Names must be unique.
	Policies []Policy
	// AllowInline lets check requests carry their own limit instead of a
	// policy name.
	AllowInline bool
	// Timeout bounds one decision's Redis call, from the moment the decision
	// is queued for it (see decisionBatcher); past it the policy fails open
	// or closed. Default 250ms.
	Timeout time.Duration
	// MinWindow and MaxWindow bound every window. Defaults 1s and 24h.
	MinWindow, MaxWindow time.Duration
	// MaxLimit bounds limit and burst. Default 1e9.
	//
	// A token bucket is bounded further, whatever these say: its window, and
	// the time an empty bucket takes to refill (window × burst / limit), at
	// most 10 years; its limit below 2^48.
	MaxLimit int64
	// CacheSize bounds the in-process cache of keys known to be over their
	// limit; 0 disables it. DefaultConfig's is 10000.
	CacheSize int
	// Batch is how many decisions of concurrent requests may go to Redis in
	// one script call (see decisionBatcher); 1 sends each decision in a call
	// of its own. On a Redis Cluster a batch is split into one call per
	// bucket (see ClusterBuckets) among its keys. Default 128.
	Batch int
	// ClusterBuckets is how many buckets, each a hash tag of its own, a
	// policy's single-limit counters are spread over on a Redis Cluster
	// (see DefaultClusterBuckets), 1-16384: a batch of decisions is one
	// script call per bucket among its keys, and a policy's decisions use
	// at most this many primaries. Every instance of a deployment must use
	// the same value, or they count one key in two counters; a change moves
	// every counter, and a window in progress starts again. Choose a
	// multiple of the number of primaries. Default 12.
	ClusterBuckets int
	// MaxQueued bounds the decisions of one algorithm waiting for a call;
	// past it a decision fails at once as unavailable. Default 10000.
	MaxQueued int
	// LogInterval is how often a fail-open policy may log that Redis is down.
	// Default 10s.
	LogInterval time.Duration
	// Logger receives the fail-open warnings; nil discards them.
	Logger *slog.Logger
	// Registerer receives the metrics. Nil keeps them unregistered.
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	setDefault(&c.Timeout, 250*time.Millisecond)
	setDefault(&c.MinWindow, time.Second)
	setDefault(&c.MaxWindow, 24*time.Hour)
	setDefault(&c.MaxLimit, 1_000_000_000)
	setDefault(&c.Batch, 128)
	setDefault(&c.MaxQueued, 10000)
	setDefault(&c.ClusterBuckets, DefaultClusterBuckets)
	setDefault(&c.LogInterval, 10*time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// setDefault sets *v to d when it is unset (not above zero).
func setDefault[T ~int | ~int64](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// DefaultCacheSize is DefaultConfig's CacheSize.
const DefaultCacheSize = 10000

// DefaultConfig returns the configuration the server's flags take their
// defaults from: a zero Config's, with the deny cache on.
func DefaultConfig() Config {
	c := Config{}.withDefaults()
	c.CacheSize = DefaultCacheSize
	return c
}

// Validate reports policies and bounds that cannot work, naming the policy
// and field at fault.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.CacheSize < 0 {
		return fmt.Errorf("rate limit cache size %d must not be negative", c.CacheSize)
	}
	if c.ClusterBuckets > store.ClusterSlots {
		return fmt.Errorf("rate limit cluster buckets %d is above the %d slots of a cluster", c.ClusterBuckets, store.ClusterSlots)
	}
	if c.MinWindow > c.MaxWindow {
		return fmt.Errorf("rate limit min window %s is above max window %s", c.MinWindow, c.MaxWindow)
	}
	seen := map[string]bool{}
	for _, p := range c.Policies {
		if seen[p.Name] {
			return fmt.Errorf("policy %q is defined twice", p.Name)
		}
		seen[p.Name] = true
		if err := c.validatePolicy(p.withDefaults()); err != nil {
			return err
		}
	}
	return nil
}
