package service

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// pipeliner is the part of a go-redis client that runs a script and WAIT on
// one connection, which the replicated path needs: WAIT counts the replicas
// that have every write made on its own connection.
type pipeliner interface {
	Pipeline() redis.Pipeliner
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

// runReplicated runs sc and then WAIT on the same connection, so a state
// change is reported only once cfg.MinReplicas replicas have it. On NOSCRIPT
// it loads the script and runs both again, once. Returns a
// *ReplicationError when too few replicas acknowledged in time, and errors
// translated by storeErr otherwise.
func (s *Service) runReplicated(ctx, opCtx context.Context, sc *script, keys []string, args ...any) (any, error) {
	p := s.rdb.(pipeliner) // New checks it when MinReplicas is set
	exec := func() (*redis.Cmd, *redis.IntCmd) {
		pipe := p.Pipeline()
		ev := pipe.EvalSha(opCtx, sc.sha, keys, args...)
		wait := redis.NewIntCmd(opCtx, "wait", s.cfg.MinReplicas, s.cfg.ReplicaTimeout.Milliseconds())
		_ = pipe.Process(opCtx, wait)
		_, _ = pipe.Exec(opCtx) // each command carries its own error
		return ev, wait
	}
	ev, wait := exec()
	if isNoScript(ev.Err()) {
		s.metrics.scriptReloads.Inc()
		if err := s.rdb.ScriptLoad(opCtx, sc.src).Err(); err != nil {
			return nil, s.storeErr(ctx, sc.name, err)
		}
		ev, wait = exec()
	}
	res, err := ev.Result()
	if err != nil {
		return nil, s.storeErr(ctx, sc.name, err)
	}
	if !changed(res) {
		// Nothing the client is told about changed (held, not owner, not
		// found): WAIT counts every earlier write of the connection, so
		// too few replicas would wrongly turn a 409 or 404 into a 503.
		return res, nil
	}
	acked, err := wait.Result()
	if err != nil {
		// The change is made; whatever refused WAIT (an ACL, a proxy), the
		// client cannot be told it is replicated: unavailable, not a
		// script error, so a lease granted here is given back.
		s.metrics.redisErrors.WithLabelValues(sc.name, "replicas").Inc()
		return nil, fmt.Errorf("%s: %w: wait for replicas: %s", sc.name, ErrUnavailable, err)
	}
	if acked < int64(s.cfg.MinReplicas) {
		s.metrics.redisErrors.WithLabelValues(sc.name, "replicas").Inc()
		return nil, &ReplicationError{Acked: acked, Want: int64(s.cfg.MinReplicas)}
	}
	return res, nil
}
