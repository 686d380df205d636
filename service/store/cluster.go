package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterClient is the part of go-redis's *redis.ClusterClient the store
// uses on a Redis Cluster: the primaries, each for its checks and its
// scripts, and the primary of a key, for a script that must run on a
// connection of its own (RunReplicated).
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

// ErrSlotMoved reports a call Redis answered MOVED or ASK, and that was not
// followed to the slot's new node (a call on one node's connection, as
// RunReplicated makes, or a cluster client's redirects ran out): the slot
// failed over or is moving, and the script did not run. Redis did answer,
// so it is not a timeout; a call again goes to the new node. It wraps
// ErrUnavailable.
var ErrSlotMoved = fmt.Errorf("%w: the key's slot is served by another node", ErrUnavailable)

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

// reloadAfterNoScript loads sc where the EVALSHA that met NOSCRIPT can
// have gone, so that the call sent again runs by SHA: on c itself (one
// Redis), or on a cluster client on every node of its view, primaries and
// replicas alike. Loading it on the primary the cluster client names for
// keys[0] would not do: during a failover that view may name another node
// than the one that answered (the old primary, now a replica, or a new
// primary restarted empty), and the EVALSHA sent again would meet NOSCRIPT
// once more. A node that does not answer is skipped: the call sent again
// says whether the node of its slot has the script. Returns the error of
// loading it on a single Redis.
func (s *Store) reloadAfterNoScript(ctx context.Context, c redis.Scripter, sc *Script) error {
	cc, ok := c.(clusterClient)
	if !ok {
		return s.load(ctx, c, sc)
	}
	// The nodes are asked at once, each for at most half the time the call
	// has left, so one that does not answer (paused, or dead and not yet
	// out of the view) leaves the call sent again time to run.
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Until(deadline)/2)
		defer cancel()
	}
	load := func(ctx context.Context, node *redis.Client) error {
		_ = s.load(ctx, node, sc)
		return nil
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = cc.ForEachMaster(ctx, load) })
	wg.Go(func() { _ = cc.ForEachSlave(ctx, load) })
	wg.Wait()
	return nil
}

// rerouteWait bounds how long a call that could not reach its slot's
// primary waits for the cluster client to name another: go-redis reloads
// its view of the slots at most every 200ms.
const rerouteWait = 300 * time.Millisecond

// Rerouted is rerouted, for callers that send EVALSHA on the store's client
// themselves (the rate-limit batcher): after err, a call of keys may be
// sent again, once, when it reports true.
func (s *Store) Rerouted(ctx context.Context, keys []string, err error) bool {
	return s.rerouted(ctx, keys, err)
}

// rerouted reports, after a call on a cluster client could not connect to
// the primary of keys[0]'s slot (a dial error: nothing was sent, so the
// call may be sent again), whether the client's view of the slots names
// another primary for it now, reloading it and waiting up to rerouteWait
// (and ctx) for that. A call sent right after a failover was seen by every
// node may go to the dead primary until the view is reloaded; with this it
// goes to the new one, once. During the failover itself the view names the
// dead primary, and the call fails after the wait.
func (s *Store) rerouted(ctx context.Context, keys []string, err error) bool {
	cc, ok := s.rdb.(clusterClient)
	if !ok || len(keys) == 0 || !isDialError(err) {
		return false
	}
	failed, ferr := cc.MasterForKey(ctx, keys[0])
	if ferr != nil {
		return false
	}
	return movedFrom(ctx, cc, failed, keys[0])
}

// movedFrom reports whether cc's view of the slots names another primary
// than failed for key, reloading it and waiting up to rerouteWait (and ctx)
// for that (see rerouted).
func movedFrom(ctx context.Context, cc clusterClient, failed *redis.Client, key string) bool {
	t := time.NewTimer(rerouteWait)
	defer t.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		cc.ReloadState(ctx)
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return false
		case <-tick.C:
		}
		if node, err := cc.MasterForKey(ctx, key); err == nil && node.Options().Addr != failed.Options().Addr {
			return true
		}
	}
}

// isDialError reports a call that failed to connect: it was not sent.
func isDialError(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// isRedirect reports a MOVED or ASK reply: the slot is served elsewhere
// (a failover, a slot move), and the script did not run.
func isRedirect(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}
