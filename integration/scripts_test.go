package integration

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service"
	"github.com/redis/go-redis/v9"
)

// newPrivateEnv starts a server on a Redis container of its own, for tests
// that flush, reset statistics or otherwise disturb the whole Redis.
func newPrivateEnv(t testing.TB, opts ...envOption) *testEnv {
	t.Helper()
	_, url := startRedisContainer(t)
	return newTestEnvOn(t, newClient(t, url), url, opts...)
}

// lockScripts are the sources of the lock scripts, by name.
var lockScripts = map[string]string{
	"acquire": lua.Acquire, "release": lua.Release, "renew": lua.Renew,
	"inspect": lua.Inspect, "force_release": lua.ForceRelease,
}

func sha1Hex(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

// loadedScripts reports, per lock script name, whether Redis has it cached.
func loadedScripts(t testing.TB, rdb *redis.Client) map[string]bool {
	t.Helper()
	names := make([]string, 0, len(lockScripts))
	shas := make([]string, 0, len(lockScripts))
	for name, src := range lockScripts {
		names = append(names, name)
		shas = append(shas, sha1Hex(src))
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
func commandCalls(t testing.TB, rdb *redis.Client) map[string]int64 {
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
			testScriptsRunWithEvalSha(t, newServerOnURL(t, url, c.wrap, 2*time.Second))
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
	*redis.Client
	target string // the source to break
}

func (b brokenScripts) ScriptLoad(ctx context.Context, src string) *redis.StringCmd {
	if src == b.target {
		src += "\nthis is not lua ("
	}
	return b.Client.ScriptLoad(ctx, src)
}

func TestBrokenScriptStopsStartup(t *testing.T) {
	rdb, url := newRedis(t)
	svc, err := service.New(brokenScripts{Client: rdb, target: lua.Renew}, service.Config{KeyPrefix: uniquePrefix()})
	if err != nil {
		t.Fatal(err)
	}
	// cmd/server stops with "start-up: <err>" on any LoadScripts error that
	// is not ErrUnavailable.
	err = svc.LoadScripts(t.Context())
	if err == nil {
		t.Fatalf("LoadScripts with a broken renew script on %s succeeded", url)
	}
	if errors.Is(err, service.ErrUnavailable) {
		t.Errorf("LoadScripts error %q wraps ErrUnavailable: the server would start and serve 503 instead of stopping", err)
	}
	for _, want := range []string{"load script renew", "Error compiling script"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("LoadScripts error %q does not contain %q", err, want)
		}
	}
	// Readiness fails the same way.
	if err := svc.Ready(t.Context()); err == nil || errors.Is(err, service.ErrUnavailable) {
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
