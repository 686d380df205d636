package store

import (
	"context"
	"fmt"
	"strings"

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

// ReplicasError reports a primary with fewer replicas connected than
// Config.MinReplicas: every change that waits for them would be refused
// (503) until enough are. It wraps ErrUnavailable.
type ReplicasError struct {
	Primary   string // the primary's address on a Redis Cluster, "" on one node
	Connected int    // replicas connected and in sync (INFO replication: state=online)
	Required  int    // Config.MinReplicas
}

func (e *ReplicasError) Error() string {
	who := "the primary"
	if e.Primary != "" {
		who = "primary " + e.Primary
	}
	return fmt.Sprintf("%s has %d replicas connected, %d required (-redis-min-replicas): every lock change is refused until enough are",
		who, e.Connected, e.Required)
}

// Unwrap makes errors.Is(err, ErrUnavailable) true.
func (e *ReplicasError) Unwrap() error { return ErrUnavailable }

// CheckReplicas checks, when Config.MinReplicas is set, that the primary
// (on a Redis Cluster, every primary) has at least that many replicas
// connected and in sync, from INFO replication. Returns a *ReplicasError
// naming the first primary short of them, an error wrapping ErrUnavailable
// when a primary cannot be reached, and nil when MinReplicas is 0 or Redis
// refuses INFO (an ACL without it: the replicas cannot be counted).
func (s *Store) CheckReplicas(ctx context.Context) error {
	if s.cfg.MinReplicas == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	check := func(primary, info string) error {
		if n := onlineReplicas(info); n < s.cfg.MinReplicas {
			return &ReplicasError{Primary: primary, Connected: n, Required: s.cfg.MinReplicas}
		}
		return nil
	}
	var err error
	if cc, ok := s.rdb.(clusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			info, err := c.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			return check(c.Options().Addr, info)
		})
	} else {
		cn := s.rdb.(conner).Conn() // New checks it when MinReplicas is set
		defer func() { _ = cn.Close() }()
		var info string
		if info, err = cn.Info(ctx, "replication").Result(); err == nil {
			err = check("", info)
		}
	}
	if _, short := err.(*ReplicasError); err == nil || short {
		return err
	}
	if IsServerError(err) && !isTransient(err) {
		// Redis refused INFO (an ACL): the replicas cannot be counted,
		// and the changes' own WAIT still refuses what they lack.
		return nil
	}
	return s.Err(ctx, "info replication", err)
}

// onlineReplicas counts the replicas an INFO replication reply lists as
// online: those WAIT can count on (one still loading its copy cannot
// acknowledge a write).
func onlineReplicas(info string) int {
	n := 0
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, ",state=online,") {
			n++
		}
	}
	return n
}
