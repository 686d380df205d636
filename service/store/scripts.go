package store

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Script is one Lua operation, called by SHA with EVALSHA.
type Script struct {
	name    string
	src     string
	sha     string
	cluster *Script // run in its place on a cluster (Config.Cluster), when set
}

// NewScript returns the script src, called name in errors and metrics.
func NewScript(name, src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

// Name is the script's name in errors and metrics.
func (sc *Script) Name() string { return sc.name }

// SHA is the SHA1 of the script's source, its name in Redis's script cache.
func (sc *Script) SHA() string { return sc.sha }

// WithClusterVariant makes a store on a cluster (Config.Cluster) load and
// run rewrite(sc's source) in sc's place, under sc's name, when it differs:
// a script whose Redis Cluster form differs, such as one publishing with
// SPUBLISH. Call it before the script is registered. It returns sc.
func (sc *Script) WithClusterVariant(rewrite func(src string) string) *Script {
	if src := rewrite(sc.src); src != sc.src {
		sc.cluster = NewScript(sc.name, src)
	}
	return sc
}

// variant is the form of sc this store runs.
func (s *Store) variant(sc *Script) *Script {
	if s.cfg.Cluster && sc.cluster != nil {
		return sc.cluster
	}
	return sc
}

// LoadScripts sends SCRIPT LOAD for every script, so a script Redis cannot
// compile stops start-up. On a Redis Cluster it loads them on every primary,
// and on every replica that answers. Returns an error wrapping
// ErrUnavailable when Redis cannot be reached, and a plain error naming the
// script when Redis rejects it.
func (s *Store) LoadScripts(ctx context.Context) error {
	if cc, ok := s.rdb.(clusterClient); ok {
		return s.loadCluster(ctx, cc, true)
	}
	return s.loadAll(ctx, s.rdb)
}

// loadAll loads every script on c. Errors as LoadScripts.
func (s *Store) loadAll(ctx context.Context, c redis.Scripter) error {
	for _, sc := range s.scripts {
		if err := s.load(ctx, c, sc); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) load(ctx context.Context, c redis.Scripter, sc *Script) error {
	sc = s.variant(sc)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	sha, err := c.ScriptLoad(ctx, sc.src).Result()
	if err != nil {
		if IsServerError(err) && !isTransient(err) {
			return fmt.Errorf("load script %s: %w", sc.name, err)
		}
		return s.Err(ctx, "load "+sc.name, err)
	}
	if sha != sc.sha {
		return fmt.Errorf("load script %s: redis returned sha %s, want %s", sc.name, sha, sc.sha)
	}
	return nil
}

// Run calls a script with EVALSHA. On NOSCRIPT (Redis restarted, failed over
// or flushed its script cache) it loads the script with SCRIPT LOAD where the
// call can have gone and calls it again by SHA, once. Errors are translated
// by Err.
func (s *Store) Run(ctx context.Context, sc *Script, keys []string, args ...any) (any, error) {
	opCtx := ctx
	if deadline, ok := ctx.Deadline(); !ok || time.Until(deadline) > s.cfg.OpTimeout {
		// Only when the caller's own deadline is later: a timer per call
		// costs more than the script on the hot path.
		var cancel context.CancelFunc
		opCtx, cancel = context.WithTimeout(ctx, s.cfg.OpTimeout)
		defer cancel()
	}
	res, err := s.EvalSha(opCtx, s.rdb, sc, keys, args...)
	if err != nil && s.rerouted(opCtx, keys, err) {
		res, err = s.EvalSha(opCtx, s.rdb, sc, keys, args...)
	}
	if err != nil {
		return nil, s.Err(ctx, sc.name, err)
	}
	return res, nil
}

// EvalSha calls sc on c with EVALSHA; on NOSCRIPT it loads the script
// (reloadAfterNoScript) and calls it again, once, by SHA. Errors are
// go-redis's, untranslated.
func (s *Store) EvalSha(ctx context.Context, c redis.Scripter, sc *Script, keys []string, args ...any) (any, error) {
	sc = s.variant(sc)
	res, err := c.EvalSha(ctx, sc.sha, keys, args...).Result()
	if err != nil && isNoScript(err) {
		s.metrics.scriptReloads.Inc()
		if err := s.reloadAfterNoScript(ctx, c, sc); err != nil {
			return nil, err
		}
		res, err = c.EvalSha(ctx, sc.sha, keys, args...).Result()
	}
	return res, err
}

// Err translates a Redis error (see TranslateErr) and counts it in
// latchkey_redis_errors_total.
func (s *Store) Err(ctx context.Context, op string, err error) error {
	err, kind := TranslateErr(ctx, op, err)
	s.CountErr(op, kind)
	return err
}

// CountErr counts one failed operation of a kind TranslateErr named ("" is
// not counted: the caller went away). On a Redis Cluster an unavailable
// node also makes the client read the slot table again, in the background:
// a failover may have promoted a replica, which go-redis would otherwise
// learn of only from a redirect or when its table is a minute old.
func (s *Store) CountErr(op, kind string) {
	if kind == "" {
		return
	}
	s.metrics.redisErrors.WithLabelValues(op, kind).Inc()
	if cc, ok := s.rdb.(clusterClient); ok && kind == "unavailable" {
		cc.ReloadState(context.Background())
	}
}

// TranslateErr translates a Redis error. A caller that went away gets its own
// context error back (kind ""); timeouts, connection failures and transient
// server states wrap ErrUnavailable (kind "unavailable"), a MOVED or ASK
// through ErrSlotMoved; anything else (a
// script bug) is returned wrapped as it is and becomes a 500 upstream (kind
// "script").
func TranslateErr(ctx context.Context, op string, err error) (error, string) {
	if ctxErr := ctx.Err(); errors.Is(ctxErr, context.Canceled) {
		return ctxErr, ""
	}
	if IsServerError(err) && !isTransient(err) {
		return fmt.Errorf("%s: %w", op, err), "script"
	}
	if isRedirect(err) {
		return fmt.Errorf("%s: %w: %w", op, ErrSlotMoved, err), "unavailable"
	}
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err), "unavailable"
}

func IsServerError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !errors.Is(err, redis.Nil)
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// isTransient reports server replies that mean "not now" rather than "never".
// A MOVED or ASK gets here only when a cluster client's redirects ran out
// or on a connection of one node: the slot is moving or failing over.
func isTransient(err error) bool {
	for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS", "MOVED", "ASK"} {
		if redis.HasErrorPrefix(err, p) || strings.HasPrefix(err.Error(), p) {
			return true
		}
	}
	return false
}

// Int64s decodes a script's array-of-integers reply.
func Int64s(op string, res any, n int) ([]int64, error) {
	arr, ok := res.([]any)
	if !ok || len(arr) < n {
		return nil, fmt.Errorf("%s: unexpected reply %T %v", op, res, res)
	}
	out := make([]int64, len(arr))
	if i, ok := FillInt64s(arr, out); !ok {
		return nil, fmt.Errorf("%s: reply[%d] is %T, want int64", op, i, arr[i])
	}
	return out, nil
}

// FillInt64s copies the integers of a script reply into out (as long as
// arr). It reports the index of the first element that is not an integer.
func FillInt64s(arr []any, out []int64) (bad int, ok bool) {
	for i, v := range arr {
		x, ok := v.(int64)
		if !ok {
			return i, false
		}
		out[i] = x
	}
	return 0, true
}
