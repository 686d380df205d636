package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// clusterClient is the part of go-redis's *redis.ClusterClient the store
// uses on a Redis Cluster: the primaries, each for its checks and its
// scripts, and the primary of a key, for a script that must run on a
// connection of its own (RunReplicated) or load where NOSCRIPT came from.
type clusterClient interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error
	ForEachSlave(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	ReloadState(ctx context.Context)
}

// ErrClusterState reports a Redis Cluster primary whose CLUSTER INFO says
// cluster_state is not ok: some slots have no reachable primary, and calls
// on their keys fail. It wraps ErrUnavailable.
var ErrClusterState = fmt.Errorf("%w: the redis cluster state is not ok", ErrUnavailable)

// clusterReady checks CLUSTER INFO on every primary. Returns an error
// wrapping ErrClusterState when one reports a state other than ok or no
// primary serves a slot, and
// errors translated by Err when one cannot be asked.
func (s *Store) clusterReady(ctx context.Context, cc clusterClient) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	var primaries atomic.Int64
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		primaries.Add(1)
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		if state := ClusterState(info); state != "ok" {
			return fmt.Errorf("%w: %s says cluster_state:%s", ErrClusterState, c.Options().Addr, state)
		}
		return nil
	})
	if err == nil && primaries.Load() == 0 {
		err = fmt.Errorf("%w: no primary serves a slot", ErrClusterState)
	}
	if err != nil {
		// A failover may have changed the primaries: the next check asks
		// the new ones.
		cc.ReloadState(ctx)
	}
	if errors.Is(err, ErrClusterState) {
		s.CountErr("cluster info", "unavailable")
		return err
	}
	if err != nil {
		return s.Err(ctx, "cluster info", err)
	}
	return nil
}

// ClusterState returns the cluster_state field of a CLUSTER INFO (or INFO
// cluster) reply, "" when it has none.
func ClusterState(info string) string { return infoField(info, "cluster_state") }

// ClusterEnabled reports whether an INFO cluster reply says the node runs
// in cluster mode (cluster_enabled:1).
func ClusterEnabled(info string) bool { return infoField(info, "cluster_enabled") == "1" }

// infoField returns the value of name in an INFO-style reply of
// "name:value" lines.
func infoField(info, name string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), name+":"); ok {
			return v
		}
	}
	return ""
}

// loadCluster loads every script on every primary, and, when replicas is
// set, on every replica too, so that one promoted by a failover has them
// already; a replica that cannot load them is skipped (a call after its
// promotion loads what it lacks on NOSCRIPT). Errors as LoadScripts.
func (s *Store) loadCluster(ctx context.Context, cc clusterClient, replicas bool) error {
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		return s.loadAll(ctx, c)
	})
	if err != nil {
		return err
	}
	if replicas {
		_ = cc.ForEachSlave(ctx, func(ctx context.Context, c *redis.Client) error {
			return s.loadAll(ctx, c)
		})
	}
	return nil
}

// reloadFor loads sc where a call on keys answered NOSCRIPT: on a cluster,
// on the primary of keys[0]'s slot only, so a failed node elsewhere cannot
// keep it from healing; otherwise on c.
func reloadFor(ctx context.Context, c redis.Scripter, sc *Script, keys []string) error {
	if cc, ok := c.(clusterClient); ok && len(keys) > 0 {
		node, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return err
		}
		c = node
	}
	return c.ScriptLoad(ctx, sc.src).Err()
}

// isRedirect reports a MOVED or ASK reply: the slot is served elsewhere
// (a failover, a slot move), and the script did not run.
func isRedirect(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}
