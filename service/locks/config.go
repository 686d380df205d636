package locks

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config tunes a lock Service. Zero values fall back to the defaults below.
type Config struct {
	// DefaultTTL is the lease TTL when a request gives none. Default 30s.
	DefaultTTL time.Duration
	// MinTTL and MaxTTL bound a requested TTL. Defaults 1ms and 1h.
	MinTTL, MaxTTL time.Duration
	// FenceTTL is how long a fence counter outlives its last grant. Default 30 days.
	FenceTTL time.Duration
	// MaxWait bounds how long an acquire may wait for a lock. Default 60s.
	MaxWait time.Duration
	// SubscriberPing is how often the shared pub/sub connection is checked
	// with PING when no message arrives. Default 10s.
	SubscriberPing time.Duration
	// Registerer receives the service's metrics. Nil keeps them unregistered.
	Registerer prometheus.Registerer

	// Keep-alive leases (see keepalive.go and renewer.go).

	// DefaultMaxHold bounds a keep-alive lease that names no max_hold. Default 1h.
	DefaultMaxHold time.Duration
	// MaxHoldCap is the largest max_hold a request may ask for. Default 24h.
	MaxHoldCap time.Duration
	// LostTTL is how long the reason a keep-alive lease was lost stays
	// readable by its owner. Default 1h.
	LostTTL time.Duration
	// RenewBatch is how many keep-alive leases one renewal script call
	// handles. Default 100.
	RenewBatch int
	// RenewParallel is how many renewal script calls (of up to RenewBatch
	// leases each) the renewer keeps in flight at once: each look at the
	// registry lists up to RenewBatch × RenewParallel due leases. Default 8.
	RenewParallel int
	// RenewPoll is the longest the renewer sleeps between looks at the
	// registry; it bounds how late a lease acquired on another instance is
	// first renewed. Default 100ms.
	RenewPoll time.Duration
}

func (c Config) withDefaults() Config {
	if c.DefaultTTL <= 0 {
		c.DefaultTTL = 30 * time.Second
	}
	if c.MinTTL <= 0 {
		c.MinTTL = time.Millisecond
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = time.Hour
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 60 * time.Second
	}
	if c.SubscriberPing <= 0 {
		c.SubscriberPing = 10 * time.Second
	}
	if c.FenceTTL <= 0 {
		c.FenceTTL = 30 * 24 * time.Hour
	}
	c = c.keepaliveDefaults()
	return c
}

// DefaultConfig returns the configuration a zero Config falls back to: the
// server's flags take their defaults from it.
func DefaultConfig() Config { return Config{}.withDefaults() }

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.MinTTL > c.MaxTTL {
		return fmt.Errorf("min ttl %s is above max ttl %s", c.MinTTL, c.MaxTTL)
	}
	if c.DefaultTTL < c.MinTTL || c.DefaultTTL > c.MaxTTL {
		return fmt.Errorf("default ttl %s is outside [%s, %s]", c.DefaultTTL, c.MinTTL, c.MaxTTL)
	}
	if c.FenceTTL < c.MaxTTL {
		return fmt.Errorf("fence ttl %s must be at least the max ttl %s", c.FenceTTL, c.MaxTTL)
	}
	if c.DefaultMaxHold > c.MaxHoldCap {
		return fmt.Errorf("default max hold %s is above the max hold cap %s", c.DefaultMaxHold, c.MaxHoldCap)
	}
	return nil
}
