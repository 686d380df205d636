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
	// FenceTTL is the fence retention: how long a lock name's fence counter
	// (a semaphore's capacity record) outlives the last lease it fenced.
	// A grant or renewal keeps the counter for the lease's span (its TTL,
	// or a keep-alive lease's max hold) and the retention after it; the
	// release or force-release that leaves no lease keeps it for the
	// retention only. Past it a name used once leaves no key in Redis, and
	// its next grant's fence comes from Redis's clock (see acquire.lua):
	// fences keep increasing as long as that clock never steps back by more
	// than the retention. Default 1h.
	FenceTTL time.Duration
	// MaxWait bounds how long an acquire may wait for a lock. Default 60s.
	MaxWait time.Duration
	// SubscriberPing is how often the shared pub/sub connection is checked
	// with PING when no message arrives. Default 10s.
	SubscriberPing time.Duration
	// WatchResync is how often a watched name's state is read again when
	// no message of its channel came (see Watch): it heals a message
	// missed while the subscription looked healthy (a re-subscription is
	// healed at once, by a read on its confirmation). One read per watched
	// name, whatever its watches. Default 10s.
	WatchResync time.Duration
	// Registerer receives the service's metrics. Nil keeps them unregistered.
	Registerer prometheus.Registerer
	// Quotas returns the quota of a tenant (see store.TenantOf and
	// quota.go), asked on each request, so a reloaded quota applies at once.
	// Nil, or a zero Quota, counts nothing.
	Quotas func(tenant string) Quota

	// Keep-alive leases (see keepalive.go and renewer.go).

	// DefaultMaxHold bounds a keep-alive lease that names no max_hold. Default 1h.
	DefaultMaxHold time.Duration
	// MaxHoldCap is the largest max_hold a request may ask for. Default 24h.
	MaxHoldCap time.Duration
	// LostTTL is how long the reason a keep-alive lease was lost stays
	// readable by its owner. Default 1h, or FenceTTL when shorter.
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
	// MinKeepaliveTTL is the shortest TTL a keep-alive lease may have. The
	// renewer renews a lease ttl/3 after its grant and finds it due within
	// one RenewPoll, so a renewal has 2/3 of the TTL, less a poll, to run
	// before the lease expires: 10 polls (the default, 1s at the default
	// poll) leave it more than 5 polls. At least 3 polls. A MaxTTL below it
	// leaves the server without keep-alive leases, not refused: it may
	// serve plain leases only.
	MinKeepaliveTTL time.Duration
}

// withDefaults fills in every unset field: first the defaults that stand
// alone (standalone), then those derived from other fields (derived), so a
// derived default follows the fields as given, not their defaults.
func (c Config) withDefaults() Config { return c.standalone().derived() }

// standalone fills in the unset fields whose defaults depend on no other
// field. MaxHoldCap is 24h unless DefaultMaxHold, set longer, raises it.
func (c Config) standalone() Config {
	setDefault(&c.DefaultTTL, 30*time.Second)
	setDefault(&c.MinTTL, time.Millisecond)
	setDefault(&c.MaxTTL, time.Hour)
	setDefault(&c.MaxWait, 60*time.Second)
	setDefault(&c.SubscriberPing, 10*time.Second)
	setDefault(&c.WatchResync, 10*time.Second)
	setDefault(&c.FenceTTL, DefaultFenceTTL)
	setDefault(&c.DefaultMaxHold, time.Hour)
	setDefault(&c.MaxHoldCap, max(24*time.Hour, c.DefaultMaxHold))
	setDefault(&c.RenewBatch, 100)
	setDefault(&c.RenewParallel, 8)
	setDefault(&c.RenewPoll, 100*time.Millisecond)
	return c
}

// derived fills in the unset fields whose defaults follow other fields:
// LostTTL is 1h, or FenceTTL when shorter (every key of a name is gone
// within the retention), and MinKeepaliveTTL is 10 RenewPolls.
func (c Config) derived() Config {
	setDefault(&c.LostTTL, min(time.Hour, c.FenceTTL))
	setDefault(&c.MinKeepaliveTTL, 10*c.RenewPoll)
	return c
}

// DefaultFenceTTL is the default fence retention (Config.FenceTTL).
const DefaultFenceTTL = time.Hour

// setDefault sets *v to d when it is unset (not above zero).
func setDefault[T ~int | ~int64](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// DefaultConfig returns the defaults a zero Config falls back to, to start
// a configuration from: the server's flags take their defaults from it.
// LostTTL and MinKeepaliveTTL are left zero, as they derive from FenceTTL
// and RenewPoll: Validate and New derive them from the fields as set, so
// a shorter FenceTTL set on DefaultConfig() still shortens LostTTL.
func DefaultConfig() Config { return Config{}.standalone() }

// Validate reports a configuration that cannot work, once its unset fields
// are filled in as New fills them (the derived ones from the fields as set).
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.MinTTL > c.MaxTTL {
		return fmt.Errorf("min ttl %s is above max ttl %s", c.MinTTL, c.MaxTTL)
	}
	if c.DefaultTTL < c.MinTTL || c.DefaultTTL > c.MaxTTL {
		return fmt.Errorf("default ttl %s is outside [%s, %s]", c.DefaultTTL, c.MinTTL, c.MaxTTL)
	}
	if c.LostTTL > c.FenceTTL {
		return fmt.Errorf("lost ttl %s must be at most the fence retention %s: a lock name's keys are all gone within it",
			c.LostTTL, c.FenceTTL)
	}
	if c.DefaultMaxHold > c.MaxHoldCap {
		return fmt.Errorf("default max hold %s is above the max hold cap %s", c.DefaultMaxHold, c.MaxHoldCap)
	}
	if c.MinKeepaliveTTL < 3*c.RenewPoll {
		return fmt.Errorf("min keep-alive ttl %s must be at least 3 renewer polls (%s): a lease could expire between two looks at it",
			c.MinKeepaliveTTL, 3*c.RenewPoll)
	}
	return nil
}
