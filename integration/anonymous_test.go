package integration

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/redis/go-redis/v9"
)

// anonymousBounds is a server scaled down so that a test sees many
// retentions go by: leases of up to 2s, a fence retention of 20s, inline
// windows of up to 10s, and the anonymous policy at 50 requests a second.
type anonymousBounds struct {
	maxTTL, retention, maxWindow time.Duration
	limit                        int64         // the anonymous policy's requests per window
	window                       time.Duration // the anonymous policy's window
}

// horizon is the longest a key made by one request lives: a lease of the
// max TTL and the fence retention after it, or a sliding window's two
// windows.
func (b anonymousBounds) horizon() time.Duration {
	return max(b.maxTTL+b.retention, 2*b.maxWindow)
}

// maxKeys is the README's bound on the keys one anonymous client can keep
// in Redis: each request it is allowed makes at most keysPerRequest keys,
// each gone within the horizon, and a fixed-window policy allows at most
// limit × (horizon / window + 2) requests in any horizon (it may start and
// end in part of a window); plus the client's own self-protection counter.
func (b anonymousBounds) maxKeys() int {
	const keysPerRequest = 2 // a semaphore's capacity and leases, a sliding window's two counters
	allowed := int(b.limit) * (int(b.horizon()/b.window) + 2)
	return keysPerRequest*allowed + 1
}

// One anonymous client beyond loopback tries 100,000 one-off names (locks
// released and left to expire, read leases, semaphore leases, inline
// rate-limit checks), ten times faster than the anonymous policy allows, over
// many fence retentions on Redis's clock. The keys it leaves in Redis never
// exceed the bound the README states (its allowed request rate × the
// horizon a one-off key lives × 3 keys), and one horizon after its last
// request nothing is left. Miniredis drives the clock (Redis TIME and key
// expiry alike), so the test takes no wall-clock time to cover them;
// TestMemoryPerOneOffName measures the bytes of each key on a real Redis.
func TestAnonymousClientKeysStayBounded(t *testing.T) {
	singleNode(t)
	b := anonymousBounds{maxTTL: 2 * time.Second, retention: 20 * time.Second, maxWindow: 10 * time.Second,
		limit: 50, window: time.Second}
	m := miniredis.RunT(t)
	start := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	m.SetTime(start)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	e := newTestEnv(t, withRedisClient(rdb, "redis://"+m.Addr()),
		withPolicies(policy("anonymous", ratelimit.FixedWindow, b.limit, b.window)),
		withRouterConfig(func(c *handlers.Config) { c.RateLimit.AnonymousPolicy = "anonymous" }),
		withServiceConfig(func(sc *serviceConfig) {
			sc.MaxTTL, sc.DefaultTTL, sc.MaxHoldCap, sc.DefaultMaxHold = b.maxTTL, time.Second, b.maxTTL, b.maxTTL
			sc.FenceTTL = b.retention
			sc.RateLimit.MaxWindow = b.maxWindow
			sc.RateLimit.CacheSize = 0 // every decision by Redis's clock, which the test moves
		}))
	h := e.srv.Config.Handler

	// Each request is 2ms after the last on Redis's clock: 500 a second,
	// ten times the policy. Key expiry catches up every 100ms.
	const step, catchUp = 2 * time.Millisecond, 50
	denied := fmt.Sprintf(`"anonymous";q=%d;w=%d`, b.limit, int(b.window.Seconds()))
	var sent, allowed, peak int
	now := start
	do := func(method, path, body string, headers ...string) *httptest.ResponseRecorder {
		now = now.Add(step)
		m.SetTime(now)
		if sent++; sent%catchUp == 0 {
			m.FastForward(catchUp * step)
		}
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.RemoteAddr = "198.51.100.7:40000"
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case rec.Code == http.StatusTooManyRequests && rec.Header().Get("RateLimit-Policy") == denied:
		case rec.Code >= 500:
			t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		default:
			allowed++
		}
		return rec
	}
	// use takes a lease on path and, when release is set, gives it back.
	use := func(path, body, query string, release bool) {
		rec := do("POST", path, body)
		if tok := rec.Header().Get("Lock-Token"); tok != "" && release {
			do("DELETE", path+query, "", "Lock-Token", tok)
		}
	}
	uses := []func(i int){
		func(i int) { use(fmt.Sprintf("/v1/locks/once-%06d", i), `{"ttl":"1s"}`, "", true) },
		func(i int) { use(fmt.Sprintf("/v1/locks/once-%06d", i), `{"ttl":"2s"}`, "", false) },
		func(i int) { use(fmt.Sprintf("/v1/locks/once-%06d", i), `{"ttl":"1s"}`, "", true) },
		func(i int) {
			use(fmt.Sprintf("/v1/rwlocks/once-%06d", i), `{"mode":"read","ttl":"2s"}`, "?mode=read", true)
		},
		func(i int) { use(fmt.Sprintf("/v1/semaphores/once-%06d", i), `{"permits":2,"ttl":"2s"}`, "", i%2 == 0) },
		func(i int) {
			do("POST", "/v1/ratelimit/check", fmt.Sprintf(`{"key":"once-%06d","limit":5,"window":"10s","algorithm":"sliding_window"}`, i))
		},
	}
	const names = 100_000
	for i := range names {
		uses[i%len(uses)](i)
		if i%500 == 0 {
			if n := len(m.Keys()); n > peak {
				peak = n
			}
		}
	}
	if n := len(m.Keys()); n > peak {
		peak = n
	}
	span := now.Sub(start)
	t.Logf("%d one-off names, %d requests over %s of Redis time (%.1f retentions), %d allowed; at most %d keys, bound %d",
		names, sent, span, float64(span)/float64(b.retention), allowed, peak, b.maxKeys())
	if span < 3*b.horizon() {
		t.Fatalf("the names took %s of Redis time, under 3 horizons (%s): the test proves little", span, b.horizon())
	}
	if lo, hi := int(b.limit)*int(span/b.window)/2, int(b.limit)*(int(span/b.window)+2); allowed < lo || allowed > hi {
		t.Errorf("%d requests allowed over %s, want between %d and %d: the anonymous policy did not pace the client", allowed, span, lo, hi)
	}
	if peak > b.maxKeys() {
		t.Errorf("%d keys in Redis at the peak, above the bound %d", peak, b.maxKeys())
	}

	m.FastForward(b.horizon() + b.window)
	if left := m.Keys(); len(left) > 0 {
		t.Errorf("%d keys left one horizon (%s) after the last request, want none: %q...", len(left), b.horizon(), left[:min(len(left), 10)])
	}
}
