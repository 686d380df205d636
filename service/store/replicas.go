package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// conner is the part of a go-redis client that the replicated path needs:
// a connection of its own for the script and then WAIT, because WAIT
// counts the replicas that have every write made on its connection.
type conner interface {
	Conn() *redis.Conn
}

// canReplicate reports whether rdb can run a script and WAIT on one
// connection: a single node's client, or a cluster client, on the
// primary of the script's slot.
func canReplicate(rdb Client) bool {
	switch rdb.(type) {
	case conner, clusterClient:
		return true
	}
	return false
}

// replicaConn returns a connection of its own for a script on keys: on a
// cluster, one of the primary that owns keys[0]'s slot (every key of a
// script shares it), where the script's writes are made and WAIT counts
// their replicas.
func (s *Store) replicaConn(ctx context.Context, keys []string) (*redis.Conn, error) {
	cc, ok := s.rdb.(clusterClient)
	if !ok {
		return s.rdb.(conner).Conn(), nil // New checks it when MinReplicas is set
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("a script without keys cannot run replicated on a cluster")
	}
	node, err := cc.MasterForKey(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	return node.Conn(), nil
}

// ReplicationError reports a state change that Redis made on the primary but
// that fewer replicas than Config.MinReplicas acknowledged within
// Config.ReplicaTimeout: a failover now may lose it. It wraps ErrUnavailable.
type ReplicationError struct {
	Acked, Want int64
}

func (e *ReplicationError) Error() string {
	return fmt.Sprintf("the change reached %d of the %d replicas required in time: a failover may lose it", e.Acked, e.Want)
}

// Unwrap makes errors.Is(err, ErrUnavailable) true.
func (e *ReplicationError) Unwrap() error { return ErrUnavailable }

// changed reports whether a script's reply says it changed what the client
// is told about: the replicated scripts answer a status, alone or first in an
// array, that is 1 or more exactly then (a grant, a release, a renewal, a
// forced release that removed a lease).
func changed(res any) bool {
	if a, ok := res.([]any); ok && len(a) > 0 {
		res = a[0]
	}
	status, ok := res.(int64)
	return !ok || status >= 1
}

// RunReplicated runs sc as Run does when MinReplicas is 0. Otherwise it
// runs sc with runReplicated. The lock service runs every state change it
// reports to a client (a grant, a release, a renewal) with it.
func (s *Store) RunReplicated(ctx context.Context, sc *Script, keys []string, args ...any) (any, error) {
	if s.cfg.MinReplicas == 0 {
		return s.Run(ctx, sc, keys, args...)
	}
	opCtx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	return s.runReplicated(ctx, opCtx, sc, keys, args...)
}

// runReplicated runs sc on a connection of its own and, when its reply
// reports a change, then WAIT on that connection, so a change is reported
// only once cfg.MinReplicas replicas have it; an answer that changed nothing
// (held, not owner, not found) does not wait. On NOSCRIPT it loads the
// script and runs it again, once. Returns a *ReplicationError when too few
// replicas acknowledged in time, an error wrapping ErrUnavailable when Redis
// refused WAIT, and errors translated by Err otherwise.
func (s *Store) runReplicated(ctx, opCtx context.Context, sc *Script, keys []string, args ...any) (any, error) {
	cn, res, err := s.evalOnConn(opCtx, sc, keys, args...)
	if err != nil {
		return nil, s.Err(ctx, sc.name, err)
	}
	defer func() { _ = cn.Close() }()
	if !changed(res) {
		return res, nil
	}
	acked, err := cn.Wait(opCtx, s.cfg.MinReplicas, s.cfg.ReplicaTimeout).Result()
	if err != nil {
		if IsServerError(err) {
			// The change is made, and Redis refused WAIT (an ACL, a
			// proxy): the client cannot be told it is replicated.
			// Unavailable, not a script error, so a lease granted here is
			// given back.
			s.metrics.redisErrors.WithLabelValues(sc.name, "replicas").Inc()
			return nil, fmt.Errorf("%s: %w: wait for replicas: %s", sc.name, ErrUnavailable, err)
		}
		return nil, s.Err(ctx, sc.name, err)
	}
	if acked < int64(s.cfg.MinReplicas) {
		s.metrics.redisErrors.WithLabelValues(sc.name, "replicas").Inc()
		return nil, &ReplicationError{Acked: acked, Want: int64(s.cfg.MinReplicas)}
	}
	return res, nil
}

// evalOnConn runs sc on a connection of its own (replicaConn) and returns
// the connection, open, with the reply. On a cluster, a MOVED or ASK reply
// (the slot failed over or is moving; the script did not run) makes the
// client read the slots again, in the background, and comes back as it
// is: the caller gets a 503, and a call after the reload goes to the new
// primary. Errors are go-redis's, untranslated; on one the connection is
// closed.
func (s *Store) evalOnConn(ctx context.Context, sc *Script, keys []string, args ...any) (*redis.Conn, any, error) {
	cn, err := s.replicaConn(ctx, keys)
	if err != nil {
		return nil, nil, err
	}
	res, err := s.EvalSha(ctx, cn, sc, keys, args...)
	if err != nil {
		_ = cn.Close()
		if cc, ok := s.rdb.(clusterClient); ok && isRedirect(err) {
			cc.ReloadState(ctx)
		}
		return nil, nil, err
	}
	return cn, res, nil
}
