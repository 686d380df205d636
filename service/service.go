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
}

// Service hands out lock leases backed by Redis.
type Service struct {
	rdb     RedisClient
	cfg     Config
	metrics *metrics
	scripts []*script
	rl      *rateLimiter
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
	s := &Service{rdb: rdb, cfg: cfg, metrics: newMetrics(cfg.Registerer), scripts: allScripts}
	s.rl = newRateLimiter(cfg.RateLimit, cfg.Registerer)
	return s, nil
}

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
