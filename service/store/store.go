package store

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// DefaultKeyPrefix prefixes every Redis key and channel Latchkey uses.
const DefaultKeyPrefix = "latchkey:"

// Client is the part of go-redis the store uses. *redis.Client,
// *redis.ClusterClient and redis.UniversalClient satisfy it; tests wrap it to
// inject faults.
type Client interface {
	redis.Scripter
	Ping(ctx context.Context) *redis.StatusCmd
	// Subscribe opens a pub/sub connection; the lock service opens one per
	// process, lazily, for the waiters of every lock.
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	// SSubscribe opens a sharded pub/sub connection (Redis 7): on a
	// cluster, to the primary of the channels' slot.
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Config tunes a Store. Zero values fall back to the defaults below.
type Config struct {
	// KeyPrefix prefixes every Redis key and channel. Default DefaultKeyPrefix.
	KeyPrefix string
	// OpTimeout bounds every Redis call. Default 2s.
	OpTimeout time.Duration
	// MinReplicas, when above 0, makes every state change run with
	// RunReplicated wait (Redis WAIT) until that many replicas have it
	// before it is reported; fewer within ReplicaTimeout is a
	// *ReplicationError. 0: off.
	MinReplicas int
	// ReplicaTimeout bounds that wait; below OpTimeout. Default 100ms.
	ReplicaTimeout time.Duration
	// Registerer receives the store's metrics. Nil keeps them unregistered.
	Registerer prometheus.Registerer
	// Cluster says the client is a Redis Cluster client: every script's
	// keys share one hash slot (see Slot), wake-ups use sharded pub/sub,
	// and the keep-alive registry is sharded by slot. New sets it when the
	// client is a go-redis cluster client.
	Cluster bool
}

func (c Config) withDefaults() Config {
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = 2 * time.Second
	}
	if c.ReplicaTimeout <= 0 {
		c.ReplicaTimeout = 100 * time.Millisecond
	}
	return c
}

// DefaultConfig returns the configuration a zero Config falls back to.
func DefaultConfig() Config { return Config{}.withDefaults() }

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.MinReplicas < 0 {
		return fmt.Errorf("min replicas %d must not be negative", c.MinReplicas)
	}
	if c.MinReplicas > 0 && c.ReplicaTimeout >= c.OpTimeout {
		return fmt.Errorf("replica timeout %s must be below the redis timeout %s", c.ReplicaTimeout, c.OpTimeout)
	}
	return nil
}

// Store runs the scripts of every domain on one Redis client.
type Store struct {
	rdb     Client
	cfg     Config
	metrics *metrics
	scripts []*Script
}

// New returns a Store on rdb. It does no I/O; call LoadScripts at start-up,
// once the domains have registered their scripts. Returns an error if cfg is
// invalid.
func New(rdb Client, cfg Config) (*Store, error) {
	if rdb == nil {
		return nil, fmt.Errorf("store: nil redis client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	cfg = cfg.withDefaults()
	if _, ok := rdb.(clusterClient); ok {
		cfg.Cluster = true
	}
	if !canReplicate(rdb) && cfg.MinReplicas > 0 {
		return nil, fmt.Errorf("store: min replicas needs a client that can run a script and WAIT on one connection")
	}
	return &Store{rdb: rdb, cfg: cfg, metrics: newMetrics(cfg.Registerer)}, nil
}

// Client returns the Redis client.
func (s *Store) Client() Client { return s.rdb }

// Config returns the effective configuration, defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// Register adds scripts to the set LoadScripts and Ready load.
func (s *Store) Register(scripts ...*Script) {
	s.scripts = append(s.scripts[:len(s.scripts):len(s.scripts)], scripts...)
}

// Ready checks that Redis answers and runs scripts: PING, then SCRIPT LOAD of
// every registered script. On a Redis Cluster it asks every primary instead:
// CLUSTER INFO must say cluster_state:ok, and the scripts are loaded on
// each. With Config.MinReplicas set, the primaries must also have that many
// replicas connected (CheckReplicas). Returns an error wrapping
// ErrUnavailable when Redis cannot be reached, ErrClusterState when a
// primary reports a cluster state other than ok, a *ReplicasError when a
// primary has too few replicas.
func (s *Store) Ready(ctx context.Context) error {
	if cc, ok := s.rdb.(clusterClient); ok {
		if err := s.clusterReady(ctx, cc); err != nil {
			return err
		}
		if err := s.loadCluster(ctx, cc, false); err != nil {
			return err
		}
		return s.CheckReplicas(ctx)
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	err := s.rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		return s.Err(ctx, "ping", err)
	}
	if err := s.LoadScripts(ctx); err != nil {
		return err
	}
	return s.CheckReplicas(ctx)
}

// metrics are the store's Prometheus collectors.
type metrics struct {
	redisErrors   *prometheus.CounterVec // op, kind
	scriptReloads prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "latchkey_redis_errors_total", Help: "Redis calls that failed, by operation and kind (unavailable, script, replicas: fewer replicas than -redis-min-replicas had the change in time).",
		}, []string{"op", "kind"}),
		scriptReloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "latchkey_script_reloads_total", Help: "Scripts reloaded after Redis answered NOSCRIPT.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.redisErrors, m.scriptReloads)
	}
	return m
}
