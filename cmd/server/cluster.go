package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// openRedis returns the client for rawURL (see newRedisClient). A URL
// naming one node, without -redis-cluster, is asked INFO cluster: a node
// that says cluster_enabled:1 is served through a cluster client, with the
// node as its seed. When the node cannot be asked (Redis is not up yet),
// the single-node client is kept and the returned check, non-nil, keeps
// /readyz not ready should the node turn out to be a cluster node (see
// clusterGuard). Errors name what in the URL is wrong.
func openRedis(ctx context.Context, rawURL string, timeout time.Duration, cluster bool, log *slog.Logger) (redis.UniversalClient, *clusterGuard, error) {
	rdb, err := newRedisClient(rawURL, timeout, cluster)
	if err != nil {
		return nil, nil, err
	}
	if redisKind(rawURL, cluster) != kindSingle {
		return rdb, nil, nil
	}
	isCluster, err := isClusterNode(ctx, rdb, timeout)
	if err != nil {
		log.Warn("could not ask redis whether it is a cluster node; serving it as a single node "+
			"(set -redis-cluster if it is one)", "err", err)
		return rdb, &clusterGuard{rdb: rdb, timeout: timeout}, nil
	}
	if !isCluster {
		return rdb, nil, nil
	}
	_ = rdb.Close()
	log.Info("redis is a cluster node (cluster_enabled:1): serving the cluster through it")
	rdb, err = newRedisClient(rawURL, timeout, true)
	return rdb, nil, err
}

// isClusterNode asks a node INFO cluster and reports whether it says
// cluster_enabled:1. A node that rejects the command (the embedded store,
// a proxy) is not a cluster node. Returns the error when the node could not
// be asked.
func isClusterNode(ctx context.Context, rdb redis.UniversalClient, timeout time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	info, err := rdb.Info(ctx, "cluster").Result()
	if err != nil {
		if store.IsServerError(err) {
			return false, nil
		}
		return false, err
	}
	return store.ClusterEnabled(info), nil
}

// clusterGuard asks the single node Latchkey started on, when it could not
// be asked at start, whether it is a cluster node, until it answers once.
type clusterGuard struct {
	rdb      redis.UniversalClient
	timeout  time.Duration
	verified atomic.Bool // the node answered: not a cluster node
}

// errClusterLate is /readyz's answer on a cluster node that Latchkey took
// for a single node: its lock scripts would fail with CROSSSLOT.
var errClusterLate = errors.New("redis is a cluster node, but it was not reachable at start-up to tell: " +
	"restart latchkey, or set -redis-cluster (LATCHKEY_REDIS_CLUSTER=true)")

// check returns errClusterLate when the node turned out to be a cluster
// node, an error wrapping store.ErrUnavailable when it cannot be asked, and
// nil once it answered that it is not one.
func (g *clusterGuard) check(ctx context.Context) error {
	if g == nil || g.verified.Load() {
		return nil
	}
	isCluster, err := isClusterNode(ctx, g.rdb, g.timeout)
	switch {
	case err != nil:
		return fmt.Errorf("info cluster: %w: %w", store.ErrUnavailable, err)
	case isCluster:
		return errClusterLate
	}
	g.verified.Store(true)
	return nil
}

// guardedLocks is the lock domain whose Ready also runs a clusterGuard.
type guardedLocks struct {
	handlers.Locks
	guard *clusterGuard
}

// Ready is clusterGuard.check, then the lock domain's Ready.
func (g guardedLocks) Ready(ctx context.Context) error {
	if err := g.guard.check(ctx); err != nil {
		return err
	}
	return g.Locks.Ready(ctx)
}
