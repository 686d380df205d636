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
	cn := s.rdb.(conner).Conn() // New checks it when MinReplicas is set
	defer func() { _ = cn.Close() }()
	res, err := s.EvalSha(opCtx, cn, sc, keys, args...)
	if err != nil {
		return nil, s.Err(ctx, sc.name, err)
	}
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
