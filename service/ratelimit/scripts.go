package ratelimit

import (
	"context"
	"fmt"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
)

// The rate-limit scripts, each named as its file in scripts/lua: one per
// algorithm, which decides single-limit policies and batches concurrent
// decisions in one call; ratelimit_multi_batch.lua, which does the same for
// policies of several limits (none leased, no calendar window);
// ratelimit_multi.lua, which decides one decision of a leased limit, a
// calendar window or a peek (of any policy) in one call;
// ratelimit_refund.lua, which gives units back, and ratelimit_reset.lua,
// an operator's reset of one key.
var (
	rateLimitFixedWindowScript   = store.NewScript("ratelimit_fixed_window", lua.Source("ratelimit_fixed_window"))
	rateLimitSlidingWindowScript = store.NewScript("ratelimit_sliding_window", lua.Source("ratelimit_sliding_window"))
	rateLimitTokenBucketScript   = store.NewScript("ratelimit_token_bucket", lua.Source("ratelimit_token_bucket"))
	rateLimitMultiScript         = store.NewScript("ratelimit_multi", lua.Source("ratelimit_multi"))
	rateLimitMultiBatchScript    = store.NewScript("ratelimit_multi_batch", lua.Source("ratelimit_multi_batch"))
	rateLimitRefundScript        = store.NewScript("ratelimit_refund", lua.Source("ratelimit_refund"))
	rateLimitResetScript         = store.NewScript("ratelimit_reset", lua.Source("ratelimit_reset"))
)

// scripts are every script the Service registers with its store.
var scripts = []*store.Script{rateLimitFixedWindowScript, rateLimitSlidingWindowScript, rateLimitTokenBucketScript, rateLimitMultiScript,
	rateLimitMultiBatchScript, rateLimitRefundScript, rateLimitResetScript}

// limitScripts are the single-limit scripts by algorithm.
var limitScripts = map[Algorithm]*store.Script{
	FixedWindow:   rateLimitFixedWindowScript,
	SlidingWindow: rateLimitSlidingWindowScript,
	TokenBucket:   rateLimitTokenBucketScript,
}

// requestArgs is one request's entries of its algorithm's script ARGV (the
// first n of args), as the scripts' header comments list them. The cost is
// the last entry of either; the rest depend on the limit only, so a
// policy's are boxed once, in its spec (limitSpec.argv).
func requestArgs(l Limit, cost int64) (args [4]any, n int) {
	if l.Algorithm == TokenBucket {
		return tokenBucketArgs(l, cost), 4
	}
	return windowArgs(l, cost), 3
}

// windowArgs is request i's ARGV of ratelimit_fixed_window.lua and
// ratelimit_sliding_window.lua, which take the same three entries.
func windowArgs(l Limit, cost int64) [4]any {
	return [4]any{
		l.Limit,                 // ARGV[3i-2] limit per window
		l.Window.Milliseconds(), // ARGV[3i-1] window, ms
		cost,                    // ARGV[3i]   cost
	}
}

// tokenBucketArgs is request i's ARGV of ratelimit_token_bucket.lua.
func tokenBucketArgs(l Limit, cost int64) [4]any {
	burst := l.Burst
	if burst == 0 {
		burst = l.Limit
	}
	return [4]any{
		l.Limit,                 // ARGV[4i-3] limit: tokens added per window
		l.Window.Milliseconds(), // ARGV[4i-2] window, ms
		burst,                   // ARGV[4i-1] burst: bucket capacity
		cost,                    // ARGV[4i]   cost
	}
}

// limitArgs are limit l's five entries of ratelimit_multi.lua's ARGV, after
// the cost and the units held from leases (n of them), and of a decision's
// ARGV in ratelimit_multi_batch.lua, after its n and its cost (unleased,
// not a calendar window there).
func limitArgs(l NamedLimit) [5]any {
	extra := l.Burst // tb: the burst
	if l.Algorithm == TokenBucket && extra == 0 {
		extra = l.Limit.Limit
	} else if l.Algorithm == FixedWindow {
		extra = l.Lease // fw: the lease
	}
	shadow := 0
	if l.Shadow {
		shadow = 1
	}
	alg := keyCode[l.Algorithm]
	if l.Calendar != nil {
		alg = "cw" // its period's end and start are set per call (periodCall)
	}
	return [5]any{
		alg,                     // ARGV[n+5i-3] algorithm
		l.Limit.Limit,           // ARGV[n+5i-2] limit
		l.Window.Milliseconds(), // ARGV[n+5i-1] window, ms
		extra,                   // ARGV[n+5i]   burst (tb) or lease (fw)
		shadow,                  // ARGV[n+5i+1] shadow
	}
}

// windowArg is the index in a limit's limitArgs of its window (for a
// calendar window, its period's end), leaseArg that of its lease (for a
// calendar window, its period's start).
const (
	windowArg = 2
	leaseArg  = 3
)

// peekArg is ratelimit_multi.lua's ARGV[6n+2]: decide, count nothing.
const peekArg = "1"

// The first entry of each request's four in a single-limit script's reply.
const (
	decisionAllowed  = 1  // allowed: the cost is counted
	decisionDenied   = 0  // denied: nothing counted
	decisionKeyError = -1 // the key cannot be used; the error's text follows
)

// The status of one limit in ratelimit_multi.lua's reply, and in every
// decision's answer per limit.
const (
	multiCounted   = 1 // every enforced limit allowed: counted
	multiDenied    = 0 // this limit denies: nothing counted anywhere
	multiBlocked   = 2 // this limit allows, another denies: nothing counted
	multiWouldDeny = 3 // this shadow limit denies: not counted, blocks nothing
)

// multiReplyPer is the entries per limit of ratelimit_multi.lua's reply:
// status, remaining, reset_ms, retry_after_ms, granted.
const multiReplyPer = 5

// decisionReply reads one request's four entries of a single-limit
// script's reply: {allowed, remaining, reset_ms, retry_after_ms}, or -1 and
// the error Redis raised for its key, which is translated and counted as a
// failed call would be.
func (s *Service) decisionReply(sc *store.Script, e []any) ([4]int64, error) {
	v, err, kind := decisionEntries(sc, e)
	s.st.CountErr(sc.Name(), kind)
	return v, err
}

// decisionEntries is decisionReply without counting the error: it also
// returns the error's kind (see translateErr).
func decisionEntries(sc *store.Script, e []any) ([4]int64, error, string) {
	var out [4]int64
	if len(e) != len(out) {
		return out, fmt.Errorf("%s: unexpected reply %v", sc.Name(), e), "script"
	}
	if e[0] == int64(decisionKeyError) {
		msg, _ := e[1].(string)
		err, kind := store.TranslateErr(context.Background(), sc.Name(), scriptError(msg))
		return out, err, kind
	}
	if i, ok := store.FillInt64s(e, out[:]); !ok {
		return out, fmt.Errorf("%s: reply[%d] is %T, want int64", sc.Name(), i, e[i]), "script"
	}
	return out, nil, ""
}

// multiReply reads ratelimit_multi.lua's reply into out (multiReplyPer
// entries per limit), counting a malformed one as a script error.
func (s *Service) multiReply(res any, out []int64) error {
	arr, _ := res.([]any)
	return s.multiFill(rateLimitMultiScript, arr, out)
}

// multiFill reads one decision's reply entries of sc, ratelimit_multi.lua
// or ratelimit_multi_batch.lua, into out (multiReplyPer entries per
// limit), counting a malformed one as a script error.
func (s *Service) multiFill(sc *store.Script, e []any, out []int64) error {
	var err error
	if len(e) != len(out) {
		err = fmt.Errorf("%s: unexpected reply %v", sc.Name(), e)
	} else if i, ok := store.FillInt64s(e, out); !ok {
		err = fmt.Errorf("%s: reply[%d] is %T, want int64", sc.Name(), i, e[i])
	}
	if err != nil {
		s.st.CountErr(sc.Name(), "script")
	}
	return err
}

// multiEntries checks one decision's entries of ratelimit_multi_batch.lua's
// reply: -1 and the error Redis raised for one of its keys, translated (its
// kind returned, see translateErr), or its entries.
func multiEntries(sc *store.Script, e []any) ([]any, error, string) {
	if len(e) >= 2 && e[0] == int64(decisionKeyError) {
		msg, _ := e[1].(string)
		err, kind := store.TranslateErr(context.Background(), sc.Name(), scriptError(msg))
		return nil, err, kind
	}
	return e, nil, ""
}

// scriptError is an error Redis raised inside a rate-limit script for one
// request's key (WRONGTYPE, OOM, ...). It is a redis.Error, so translateErr
// tells a transient state from a script error as it does for a whole call.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks the error as Redis's reply (redis.Error).
func (scriptError) RedisError() {}
