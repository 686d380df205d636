package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// newPrivateEnv starts a server on a Redis container of its own, for tests
// that flush, reset statistics or otherwise disturb the whole Redis.
func newPrivateEnv(t testing.TB, opts ...envOption) *testEnv {
	t.Helper()
	_, url := startRedisContainer(t)
	return newTestEnv(t, append(opts, withRedis(url))...)
}

// lockScripts are the sources of the lock scripts, by name.
var lockScripts = map[string]string{
	"acquire": lua.Source("acquire"), "release": lua.Source("release"), "renew": lua.Source("renew"),
	"inspect": lua.Source("inspect"), "force_release": lua.Source("force_release"),
}

// loadedScripts reports, per lock script name, whether Redis has it cached.
func loadedScripts(t testing.TB, rdb redis.UniversalClient) map[string]bool {
	t.Helper()
	names := make([]string, 0, len(lockScripts))
	shas := make([]string, 0, len(lockScripts))
	for name, src := range lockScripts {
		names = append(names, name)
		shas = append(shas, storetest.ScriptSHA(src))
	}
	exists, err := rdb.ScriptExists(t.Context(), shas...).Result()
	if err != nil {
		t.Fatalf("SCRIPT EXISTS: %v", err)
	}
	out := make(map[string]bool, len(names))
	for i, name := range names {
		out[name] = exists[i]
	}
	return out
}

// commandCalls returns the calls of every command from INFO commandstats,
// keyed by command name in lower case (evalsha, eval, script|load, ...).
func commandCalls(t testing.TB, rdb redis.UniversalClient) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		cmd, stats, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		cmd, isCmd := strings.CutPrefix(cmd, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("INFO commandstats: bad line %q", sc.Text())
				}
				out[cmd] = n
			}
		}
	}
	return out
}

// lockOps runs every lock operation once over HTTP and returns how many
// requests reached a script.
func lockOps(t testing.TB, e *testEnv, name string) int64 {
	t.Helper()
	l := e.acquire(t, name, `{"ttl":"10s"}`)
	wantStatus(t, e.do(t, "POST", "/v1/locks/"+name, "", "Lock-Token", l.Token), http.StatusOK)
	wantProblem(t, e.do(t, "POST", "/v1/locks/"+name, ""), http.StatusConflict, "lock-held")
	e.inspect(t, name, "Lock-Token", l.Token)
	wantStatus(t, e.do(t, "POST", "/v1/locks/"+name+"/renew", "", "Lock-Token", l.Token), http.StatusOK)
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", l.Token), http.StatusOK)
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name+"?force=true", "", "Authorization", "Bearer "+testAdminKey),
		http.StatusNoContent)
	return 7
}

func TestScriptsRunWithEvalSha(t *testing.T) {
	for _, c := range serverClients {
		t.Run(c.name, func(t *testing.T) {
			_, url := startRedisContainer(t)
			testScriptsRunWithEvalSha(t, newTestEnv(t, withRedis(url), withServerClient(2*time.Second), withClient(c.wrap)))
		})
	}
}

func testScriptsRunWithEvalSha(t *testing.T, e *testEnv) {
	if err := e.RDB.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	ops := lockOps(t, e, "evalsha-only")

	// After SCRIPT FLUSH, the next acquire works by itself: NOSCRIPT, SCRIPT
	// LOAD, EVALSHA again; still never EVAL.
	if err := e.RDB.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if got := loadedScripts(t, e.RDB)["acquire"]; got {
		t.Fatal("acquire script still cached after SCRIPT FLUSH")
	}
	e.acquire(t, "after-flush", "")
	if got := loadedScripts(t, e.RDB)["acquire"]; !got {
		t.Error("acquire script not loaded again after NOSCRIPT")
	}
	ops++
	ops += lockOps(t, e, "evalsha-after-flush")

	calls := commandCalls(t, e.RDB)
	// Each script the flush removed was loaded again once, on its first
	// NOSCRIPT, and that call was retried: one EVALSHA per operation plus one
	// per reload.
	reloads := int64(metricValue(t, e, "latchkey_script_reloads_total"))
	if reloads != int64(len(lockScripts)) {
		t.Errorf("latchkey_script_reloads_total = %d, want %d (every lock script reloaded once)", reloads, len(lockScripts))
	}
	if got := calls["script|load"]; got != reloads {
		t.Errorf("SCRIPT LOAD calls = %d, want %d, one per reload", got, reloads)
	}
	if got, want := calls["evalsha"], ops+reloads; got != want {
		t.Errorf("EVALSHA calls = %d, want %d (%d operations + %d retries after NOSCRIPT)", got, want, ops, reloads)
	}
	for _, cmd := range []string{"eval", "eval_ro"} {
		if calls[cmd] != 0 {
			t.Errorf("%s calls = %d, want 0: every script runs by SHA", strings.ToUpper(cmd), calls[cmd])
		}
	}
}

func TestReadyzRunsAScript(t *testing.T) {
	e := newPrivateEnv(t)
	if err := e.RDB.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.RDB.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	r := e.do(t, "GET", "/readyz", "")
	wantStatus(t, r, http.StatusOK)
	if got := r.JSON(t); got["status"] != "ready" || got["store"] != "redis" {
		t.Errorf("readyz = %v, want ready on redis", got)
	}
	for name, ok := range loadedScripts(t, e.RDB) {
		if !ok {
			t.Errorf("script %s not loaded again by /readyz after SCRIPT FLUSH", name)
		}
	}
	if got := commandCalls(t, e.RDB)["evalsha"]; got != 1 {
		t.Errorf("EVALSHA calls during /readyz = %d, want 1: readiness runs a script, not just PING", got)
	}
}

// brokenScripts is a RedisClient that sends a deliberately broken version of
// one script to SCRIPT LOAD, so the real Redis refuses to compile it. It is
// how a broken scripts/lua file reaches Redis at start-up.
type brokenScripts struct {
	store.Client
	target string // the source to break, or its cluster variant (lua.Sharded)
}

func (b brokenScripts) ScriptLoad(ctx context.Context, src string) *redis.StringCmd {
	if src == b.target || src == lua.Sharded(b.target) {
		src += "\nthis is not lua ("
	}
	return b.Client.ScriptLoad(ctx, src)
}

func TestBrokenScriptStopsStartup(t *testing.T) {
	e := newTestEnv(t, unloaded(),
		withClientOf(func(c redis.UniversalClient) store.Client {
			return brokenScripts{Client: c, target: lua.Source("renew")}
		}))
	svc := e.Svc
	// cmd/server stops with "start-up: <err>" on any LoadScripts error that
	// is not ErrUnavailable.
	err := svc.LoadScripts(t.Context())
	if err == nil {
		t.Fatalf("LoadScripts with a broken renew script on %s succeeded", e.RedisURL)
	}
	if errors.Is(err, store.ErrUnavailable) {
		t.Errorf("LoadScripts error %q wraps ErrUnavailable: the server would start and serve 503 instead of stopping", err)
	}
	for _, want := range []string{"load script renew", "Error compiling script"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("LoadScripts error %q does not contain %q", err, want)
		}
	}
	// Readiness fails the same way.
	if err := svc.lockService.Ready(t.Context()); err == nil || errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ready with a broken script = %v, want the compile error", err)
	}
}

func TestFencesIncrease(t *testing.T) {
	e := newPrivateEnv(t)
	const name = "fenced"
	var fences []int64
	start, err := e.RDB.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		l := e.acquire(t, name, `{"ttl":"10s"}`)
		fences = append(fences, l.Fence)
		switch i % 3 {
		case 0: // release
			wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", l.Token), http.StatusOK)
		case 1: // force-release
			wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name+"?force=true", "", "Authorization", "Bearer "+testAdminKey),
				http.StatusNoContent)
		case 2: // reentrant acquire and two releases keep the fence
			r := e.do(t, "POST", "/v1/locks/"+name, "", "Lock-Token", l.Token)
			if got := decodeAs[leaseJSON](t, r); got.Fence != l.Fence {
				t.Errorf("reentrant fence = %d, want %d", got.Fence, l.Fence)
			}
			e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", l.Token)
			wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", l.Token), http.StatusOK)
		}
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fence %d = %d after %d: fences must strictly increase (%v)", i, fences[i], fences[i-1], fences)
		}
	}
	// The first fence was seeded from Redis TIME in microseconds.
	if fences[0] <= start.UnixMicro() {
		t.Errorf("first fence %d is not above Redis TIME %d µs before the first grant", fences[0], start.UnixMicro())
	}

	// FLUSHALL loses the counter; the next fence is still above every fence
	// issued before, because the counter is seeded again from TIME.
	if err := e.RDB.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.RDB.Exists(t.Context(), e.fenceKey(name)).Result(); n != 0 {
		t.Fatal("fence counter survived FLUSHALL")
	}
	after := e.acquire(t, name, "")
	if last := fences[len(fences)-1]; after.Fence <= last {
		t.Errorf("first fence after FLUSHALL = %d, want > %d, the last fence before it", after.Fence, last)
	}
	// Inspecting a free lock with no counter reports 0, and does not create one.
	if st := e.inspect(t, "never-granted"); st.Fence != 0 || st.Held {
		t.Errorf("never-granted lock: %+v, want free with fence 0", st)
	}
}

var (
	tokenBucketScript   = redis.NewScript(lua.Source("ratelimit_token_bucket"))
	slidingWindowScript = redis.NewScript(lua.Source("ratelimit_sliding_window"))
)

// runLimitScript runs a rate-limit script on key with args and returns its
// reply {allowed, remaining, reset_ms, retry_after_ms}.
func runLimitScript(t testing.TB, rdb redis.UniversalClient, s *redis.Script, key string, args ...any) [4]int64 {
	t.Helper()
	res, err := s.Run(t.Context(), rdb, []string{key}, args...).Int64Slice()
	if err != nil {
		t.Fatalf("script on %s %v: %v", key, args, err)
	}
	if len(res) != 4 {
		t.Fatalf("script on %s %v: reply %v, want 4 integers", key, args, res)
	}
	return [4]int64(res)
}

// redisMicros returns the Redis clock in microseconds.
func redisMicros(t testing.TB, rdb redis.UniversalClient) int64 {
	t.Helper()
	now, err := rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now.UnixMicro()
}

// TestTokenBucketScriptCounts runs the token bucket script on real Redis for
// limits whose emission interval (window / limit) is not a whole number of
// microseconds: the first request of a full bucket leaves limit - 1 tokens,
// and exactly burst requests fit. The intervals are long enough that the
// clock moving during the test refills nothing.
func TestTokenBucketScriptCounts(t *testing.T) {
	rdb, _ := newRedis(t)
	prefix := uniquePrefix()
	for _, tt := range []struct {
		limit, windowMS, burst int64
	}{{6, 10000, 6}, {7, 10000, 7}, {11, 10000, 11}, {60, 10000, 60}, {7, 1000, 3}, {3, 10000, 3}} {
		t.Run(fmt.Sprintf("%d per %dms burst %d", tt.limit, tt.windowMS, tt.burst), func(t *testing.T) {
			key := fmt.Sprintf("%stb:%d:%d:%d", prefix, tt.limit, tt.windowMS, tt.burst)
			for i := int64(1); i <= tt.burst; i++ {
				got := runLimitScript(t, rdb, tokenBucketScript, key, tt.limit, tt.windowMS, tt.burst, 1)
				if got[0] != 1 || got[1] != tt.burst-i {
					t.Fatalf("request %d: reply %v, want allowed with %d remaining", i, got, tt.burst-i)
				}
			}
			if got := runLimitScript(t, rdb, tokenBucketScript, key, tt.limit, tt.windowMS, tt.burst, 1); got[0] != 0 || got[1] != 0 {
				t.Fatalf("request %d of a burst of %d: reply %v, want denied with 0 remaining", tt.burst+1, tt.burst, got)
			}
		})
	}
}

// TestTokenBucketScriptHighRate runs token buckets refilling faster than a
// token a microsecond, and faster than a token a nanosecond: the request is
// allowed, takes one token, and the key's expiry is a valid whole number of
// milliseconds.
func TestTokenBucketScriptHighRate(t *testing.T) {
	rdb, _ := newRedis(t)
	prefix := uniquePrefix()
	for _, limit := range []int64{4_000_000, 10_000_000, 100_000_000, 1_000_000_000, 10_000_000_000, 1 << 40} {
		t.Run(strconv.FormatInt(limit, 10), func(t *testing.T) {
			key := prefix + "tb:" + strconv.FormatInt(limit, 10)
			got := runLimitScript(t, rdb, tokenBucketScript, key, limit, 1000, limit, 1)
			if want := [4]int64{1, limit - 1, 1, 0}; got != want {
				t.Fatalf("reply %v, want %v", got, want)
			}
		})
	}
}

// TestTokenBucketScriptFreshKeys runs the token bucket script on real Redis
// for random limits (1 to 1e9), windows (1s to 24h), bursts and costs, each on
// a fresh key, where the reply does not depend on the clock: allowed, burst -
// cost remaining, reset after cost × window / limit rounded up to the
// millisecond (above 1000 tokens a window, a token's window / limit rounded
// up to the ns first). Large bursts and limits take the script's arithmetic
// past 2^53, where Lua numbers are no longer exact.
func TestTokenBucketScriptFreshKeys(t *testing.T) {
	rdb, _ := newRedis(t)
	prefix := uniquePrefix()
	rng := rand.New(rand.NewPCG(3, 5))
	logUniform := func(hi float64) int64 { return max(int64(math.Pow(hi, rng.Float64())), 1) }
	for c := 0; c < 300; c++ {
		limit, windowMS := logUniform(1e9), 1000+logUniform(86_399_000)
		burst := logUniform(1e9)
		l := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: limit, Window: time.Duration(windowMS) * time.Millisecond, Burst: burst}
		if (ratelimit.Config{Policies: []ratelimit.Policy{{Name: "p", Limit: l}}}).Validate() != nil {
			continue // a refill beyond 10 years
		}
		cost := 1 + rng.Int64N(burst)
		ceilDiv := func(n, d *big.Int) *big.Int { // n, d > 0
			return n.Add(n, d).Sub(n, big.NewInt(1)).Quo(n, d)
		}
		reset := ceilDiv(new(big.Int).Mul(big.NewInt(cost), big.NewInt(windowMS)), big.NewInt(limit))
		if limit > 1000 {
			interval := ceilDiv(big.NewInt(windowMS*1_000_000), big.NewInt(limit)) // ns
			reset = ceilDiv(interval.Mul(interval, big.NewInt(cost)), big.NewInt(1_000_000))
		}
		want := [4]int64{1, burst - cost, reset.Int64(), 0}
		key := fmt.Sprintf("%stb:%d", prefix, c)
		if got := runLimitScript(t, rdb, tokenBucketScript, key, limit, windowMS, burst, cost); got != want {
			t.Fatalf("limit %d per %dms, burst %d, cost %d: reply %v, want %v", limit, windowMS, burst, cost, got, want)
		}
	}
}

// TestTokenBucketScriptStoredForm checks what the token bucket stores on
// real Redis: the time in nanoseconds, rounded up to a whole ns, an integer
// Redis keeps in the key itself (OBJECT ENCODING int) whether window / limit
// is whole or not; and that the microsecond forms earlier versions wrote, an
// integer or a decimal, are still read: the next time is the stored one
// plus a token, exactly.
func TestTokenBucketScriptStoredForm(t *testing.T) {
	rdb, _ := newRedis(t)
	prefix := uniquePrefix()
	for _, tt := range []struct {
		name            string
		limit, windowMS int64
		intervalNS      int64  // a token: window / limit, rounded up to the ns
		stored          string // before the first request, after the current µs; "" for none
		want            string // stored after it, after the same µs; "" for the current time plus intervalNS
		remaining       int64  // after it
	}{
		{"whole microseconds", 10, 10000, 1_000_000_000, "", "", 9},
		{"a third", 3, 10000, 3_333_333_334, "", "", 2},
		{"a seventh", 7, 10000, 1_428_571_429, "", "", 6},
		{"above 1000 a window", 1001, 60000, 59_940_060, "", "", 1000},
		{"integer µs from an earlier version", 7, 10000, 1_428_571_429, "1428571", "2857142429", 5},
		{"decimal µs from an earlier version", 7, 10000, 1_428_571_429, "1428571.43", "2857142858", 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := prefix + "tb:" + strings.ReplaceAll(tt.name, " ", "-")
			before := redisMicros(t, rdb)
			if tt.stored != "" {
				whole, frac, _ := strings.Cut(tt.stored, ".")
				n, _ := strconv.ParseInt(whole, 10, 64)
				old := strconv.FormatInt(before+n, 10)
				if frac != "" {
					old += "." + frac
				}
				if err := rdb.Set(t.Context(), key, old, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if got := runLimitScript(t, rdb, tokenBucketScript, key, tt.limit, tt.windowMS, tt.limit, 1); got[0] != 1 || got[1] != tt.remaining {
				t.Fatalf("first request: reply %v, want allowed with %d remaining", got, tt.remaining)
			}
			after := redisMicros(t, rdb)
			v, err := rdb.Get(t.Context(), key).Result()
			if err != nil || !regexp.MustCompile(`^[1-9][0-9]{18}$`).MatchString(v) {
				t.Fatalf("GET = %q, %v; want an integer of 19 digits", v, err)
			}
			if enc, err := rdb.ObjectEncoding(t.Context(), key).Result(); err != nil || enc != "int" {
				t.Errorf("OBJECT ENCODING = %q, %v; want \"int\"", enc, err)
			}
			tat, err := strconv.ParseInt(v, 10, 64)
			if tt.want != "" {
				n, _ := strconv.ParseInt(tt.want, 10, 64)
				if want := before*1000 + n; err != nil || tat != want {
					t.Errorf("stored %q, want %d", v, want)
				}
			} else if lo, hi := before*1000+tt.intervalNS, after*1000+tt.intervalNS; err != nil || tat < lo || tat > hi {
				t.Errorf("stored %q, want a time between %d and %d ns", v, lo, hi)
			}
			if got := runLimitScript(t, rdb, tokenBucketScript, key, tt.limit, tt.windowMS, tt.limit, 1); got[0] != 1 || got[1] != tt.remaining-1 {
				t.Errorf("second request: reply %v, want allowed with %d remaining", got, tt.remaining-1)
			}
		})
	}
}

// TestSlidingWindowScriptAfterWindowRaised writes, on real Redis, the state a
// sliding window of 1s leaves, then decides with a window of 60s, as when a
// named policy's window is raised (its key does not name the window). The
// stored index counts 1s windows, far ahead of the current 60s index: it is
// a fresh window, not a clock that went back. One window ahead still is.
func TestSlidingWindowScriptAfterWindowRaised(t *testing.T) {
	rdb, _ := newRedis(t)
	prefix := uniquePrefix()
	const limit, windowMS = 10, 60000
	nowMS := redisMicros(t, rdb) / 1000
	if nowMS%windowMS > windowMS-5000 { // stay inside one 60s window
		time.Sleep(6 * time.Second)
		nowMS = redisMicros(t, rdb) / 1000
	}
	cur := nowMS / windowMS
	full := func(w int64) string { return strconv.FormatInt(w, 10) + "10002" } // w, c=10, p=0
	for _, tt := range []struct {
		name    string
		stored  string
		allowed bool
		want    string // the value afterwards
	}{
		{"left by a 1s window", full(nowMS / 1000), true, strconv.FormatInt(cur, 10) + "101"},
		{"left by a 10s window", full(nowMS / 10000), true, strconv.FormatInt(cur, 10) + "101"},
		{"two windows ahead", full(cur + 2), true, strconv.FormatInt(cur, 10) + "101"},
		{"one window ahead (the clock went back)", full(cur + 1), false, full(cur + 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := prefix + "sw:" + strings.ReplaceAll(tt.name, " ", "-")
			if err := rdb.Set(t.Context(), key, tt.stored, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			got := runLimitScript(t, rdb, slidingWindowScript, key, limit, windowMS, 1)
			if tt.allowed && (got[0] != 1 || got[1] != limit-1) {
				t.Fatalf("reply %v, want allowed with %d remaining (a fresh window)", got, limit-1)
			}
			if !tt.allowed && got[0] != 0 {
				t.Fatalf("reply %v, want denied (the counts kept)", got)
			}
			if v, err := rdb.Get(t.Context(), key).Result(); err != nil || v != tt.want {
				t.Errorf("GET = %q, %v; want %q", v, err, tt.want)
			}
		})
	}
}
