package service

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/redis/go-redis/v9"
)

// script is one Lua operation, called by SHA with EVALSHA.
type script struct {
	name string
	src  string
	sha  string
	// replicated marks a state change the client is told about (a grant,
	// a release, a renewal): with Config.MinReplicas set, its answer waits
	// for the replicas (runReplicated).
	replicated bool
}

func newScript(name, src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

// replicated marks sc as a state change a client is told about.
func replicated(sc *script) *script {
	sc.replicated = true
	return sc
}

var (
	acquireScript      = replicated(newScript("acquire", lua.Acquire))
	releaseScript      = replicated(newScript("release", lua.Release))
	renewScript        = replicated(newScript("renew", lua.Renew))
	inspectScript      = newScript("inspect", lua.Inspect)
	forceReleaseScript = replicated(newScript("force_release", lua.ForceRelease))
	leaveScript        = newScript("leave", lua.Leave)

	rateLimitFixedWindowScript   = newScript("ratelimit_fixed_window", lua.RateLimitFixedWindow)
	rateLimitSlidingWindowScript = newScript("ratelimit_sliding_window", lua.RateLimitSlidingWindow)
	rateLimitTokenBucketScript   = newScript("ratelimit_token_bucket", lua.RateLimitTokenBucket)
	keepaliveDueScript           = newScript("keepalive_due", lua.KeepaliveDue)
	renewBatchScript             = newScript("renew_batch", lua.RenewBatch)
)

// allScripts lists every script loaded at start-up and by Ready.
var allScripts = []*script{acquireScript, releaseScript, renewScript, inspectScript, forceReleaseScript,
	rateLimitFixedWindowScript, rateLimitSlidingWindowScript, rateLimitTokenBucketScript,
	leaveScript,
	keepaliveDueScript, renewBatchScript}

// LoadScripts sends SCRIPT LOAD for every script, so a script Redis cannot
// compile stops start-up. Returns an error wrapping ErrUnavailable when Redis
// cannot be reached, and a plain error naming the script when Redis rejects it.
func (s *Service) LoadScripts(ctx context.Context) error {
	for _, sc := range s.scripts {
		if err := s.load(ctx, sc); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) load(ctx context.Context, sc *script) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	sha, err := s.rdb.ScriptLoad(ctx, sc.src).Result()
	if err != nil {
		if isServerError(err) && !isTransient(err) {
			return fmt.Errorf("load script %s: %w", sc.name, err)
		}
		return s.storeErr(ctx, "load "+sc.name, err)
	}
	if sha != sc.sha {
		return fmt.Errorf("load script %s: redis returned sha %s, want %s", sc.name, sha, sc.sha)
	}
	return nil
}

// run calls a script with EVALSHA. On NOSCRIPT (Redis restarted, failed over
// or flushed its script cache) it loads the script and retries once. Errors
// are translated by storeErr.
func (s *Service) run(ctx context.Context, sc *script, keys []string, args ...any) (any, error) {
	opCtx := ctx
	if deadline, ok := ctx.Deadline(); !ok || time.Until(deadline) > s.cfg.OpTimeout {
		// Only when the caller's own deadline is later: a timer per call
		// costs more than the script on the hot path.
		var cancel context.CancelFunc
		opCtx, cancel = context.WithTimeout(ctx, s.cfg.OpTimeout)
		defer cancel()
	}
	if sc.replicated && s.cfg.MinReplicas > 0 {
		return s.runReplicated(ctx, opCtx, sc, keys, args...)
	}
	res, err := s.evalSha(opCtx, s.rdb, sc, keys, args...)
	if err != nil {
		return nil, s.storeErr(ctx, sc.name, err)
	}
	return res, nil
}

// evalSha calls sc on c with EVALSHA; on NOSCRIPT it loads the script on c
// and calls it again, once. Errors are go-redis's, untranslated.
func (s *Service) evalSha(ctx context.Context, c redis.Scripter, sc *script, keys []string, args ...any) (any, error) {
	res, err := c.EvalSha(ctx, sc.sha, keys, args...).Result()
	if err != nil && isNoScript(err) {
		s.metrics.scriptReloads.Inc()
		if err := c.ScriptLoad(ctx, sc.src).Err(); err != nil {
			return nil, err
		}
		res, err = c.EvalSha(ctx, sc.sha, keys, args...).Result()
	}
	return res, err
}

// storeErr translates a Redis error (see translateErr) and counts it in
// latchkey_redis_errors_total.
func (s *Service) storeErr(ctx context.Context, op string, err error) error {
	err, kind := translateErr(ctx, op, err)
	s.countErr(op, kind)
	return err
}

// countErr counts one failed operation of a kind translateErr named ("" is
// not counted: the caller went away).
func (s *Service) countErr(op, kind string) {
	if kind != "" {
		s.metrics.redisErrors.WithLabelValues(op, kind).Inc()
	}
}

// translateErr translates a Redis error. A caller that went away gets its own
// context error back (kind ""); timeouts, connection failures and transient
// server states wrap ErrUnavailable (kind "unavailable"); anything else (a
// script bug) is returned wrapped as it is and becomes a 500 upstream (kind
// "script").
func translateErr(ctx context.Context, op string, err error) (error, string) {
	if ctxErr := ctx.Err(); errors.Is(ctxErr, context.Canceled) {
		return ctxErr, ""
	}
	if isServerError(err) && !isTransient(err) {
		return fmt.Errorf("%s: %w", op, err), "script"
	}
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err), "unavailable"
}

func isServerError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !errors.Is(err, redis.Nil)
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// isTransient reports server replies that mean "not now" rather than "never".
func isTransient(err error) bool {
	for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS"} {
		if redis.HasErrorPrefix(err, p) || strings.HasPrefix(err.Error(), p) {
			return true
		}
	}
	return false
}

// int64s decodes a script's array-of-integers reply.
func int64s(op string, res any, n int) ([]int64, error) {
	arr, ok := res.([]any)
	if !ok || len(arr) < n {
		return nil, fmt.Errorf("%s: unexpected reply %T %v", op, res, res)
	}
	out := make([]int64, len(arr))
	if i, ok := fillInt64s(arr, out); !ok {
		return nil, fmt.Errorf("%s: reply[%d] is %T, want int64", op, i, arr[i])
	}
	return out, nil
}

// fillInt64s copies the integers of a script reply into out (as long as
// arr). It reports the index of the first element that is not an integer.
func fillInt64s(arr []any, out []int64) (bad int, ok bool) {
	for i, v := range arr {
		x, ok := v.(int64)
		if !ok {
			return i, false
		}
		out[i] = x
	}
	return 0, true
}
