// Package service is Latchkey's domain: lock leases and their Redis model.
// Every state change is one Lua script from scripts/lua, called with EVALSHA.
package service

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// RedisClient is the part of go-redis the service uses. *redis.Client,
// *redis.ClusterClient and redis.UniversalClient satisfy it; tests wrap it to
// inject faults.
type RedisClient interface {
	redis.Scripter
	Ping(ctx context.Context) *redis.StatusCmd
	// Subscribe opens a pub/sub connection; the service opens one per
	// process, lazily, for the waiters of every lock.
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Service hands out lock leases backed by Redis.
type Service struct {
	rdb     RedisClient
	cfg     Config
	metrics *metrics
	ka      *keepaliveMetrics
	scripts []*script
	rl      *rateLimiter
	sub     *subscriber
	regKey  string // the keep-alive registry's key, named once
}

// New returns a Service on rdb. It does no I/O; call LoadScripts at start-up.
// Returns an error if cfg is invalid.
func New(rdb RedisClient, cfg Config) (*Service, error) {
	if rdb == nil {
		return nil, fmt.Errorf("service: nil redis client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	cfg = cfg.withDefaults()
	if _, ok := rdb.(conner); cfg.MinReplicas > 0 && !ok {
		return nil, fmt.Errorf("service: min replicas needs a client that can run a script and WAIT on one connection")
	}
	m := newMetrics(cfg.Registerer)
	s := &Service{rdb: rdb, cfg: cfg, metrics: m, scripts: allScripts, regKey: cfg.KeyPrefix + "keepalive"}
	s.ka = newKeepaliveMetrics(cfg.Registerer)
	s.rl = newRateLimiter(cfg.RateLimit, cfg.Registerer)
	if _, cluster := rdb.(*redis.ClusterClient); s.rl.cfg.Batch > 1 && !cluster {
		// A batch names many keys: on a Cluster they would cross slots.
		s.rl.batchers = map[Algorithm]*decisionBatcher{}
		for alg, sc := range limitScripts {
			s.rl.batchers[alg] = newDecisionBatcher(s, sc, s.rl.cfg)
		}
	}
	s.sub = newSubscriber(rdb, cfg.OpTimeout, cfg.SubscriberPing, m)
	return s, nil
}

// Close closes the shared pub/sub connection. Waiters still waiting fall
// back to timed re-checks; new waits fail with ErrUnavailable. It does not
// close rdb.
func (s *Service) Close() error { return s.sub.close() }

// Subscriptions reports the lock channels this process is subscribed to and
// the listeners (waiters and hold streams) on them.
func (s *Service) Subscriptions() (channels, listeners int) { return s.sub.count() }

// Config returns the effective configuration, defaults filled in.
func (s *Service) Config() Config { return s.cfg }

// Ready checks that Redis answers and runs scripts: PING, SCRIPT LOAD of every
// script, then one read-only script call. Returns an error wrapping
// ErrUnavailable when Redis cannot be reached.
func (s *Service) Ready(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	err := s.rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		return s.storeErr(ctx, "ping", err)
	}
	if err := s.LoadScripts(ctx); err != nil {
		return err
	}
	_, err = s.Inspect(ctx, "latchkey-readyz", "")
	return err
}
