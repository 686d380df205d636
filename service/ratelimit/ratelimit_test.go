package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// countingClient counts the script calls that reach Redis.
type countingClient struct {
	*redis.Client
	evals atomic.Int64
}

func (c *countingClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	c.evals.Add(1)
	return c.Client.EvalSha(ctx, sha, keys, args...)
}

// rlConfig has the policies ps and the deny cache size cacheSize. Decisions
// get a minute: a policy fails open by default, and a decision that timed
// out on a loaded machine would be answered allowed (degraded, uncounted)
// and pass for one Redis made.
func rlConfig(cacheSize int, ps ...ratelimit.Policy) config {
	return config{RateLimit: ratelimit.Config{Policies: ps, AllowInline: true, CacheSize: cacheSize,
		Timeout: time.Minute}}
}

func fixed(name string, limit int64, window time.Duration) ratelimit.Policy {
	return ratelimit.Policy{Name: name, Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: limit, Window: window}}
}

func mustCheck(t testing.TB, svc *ratelimit.Service, req ratelimit.Request) ratelimit.Decision {
	t.Helper()
	d, err := svc.Check(context.Background(), req)
	if err != nil {
		t.Fatalf("Check(%+v): %v", req, err)
	}
	return d
}

func TestCheckRateLimitFixedWindow(t *testing.T) {
	svc, m := newTestService(t, rlConfig(0, fixed("per-ip", 3, 10*time.Second)))
	req := ratelimit.Request{Policy: "per-ip", Key: "192.0.2.1"}
	for i := int64(1); i <= 3; i++ {
		d := mustCheck(t, svc, req)
		want := ratelimit.Decision{Allowed: true, Policy: "per-ip", Key: "192.0.2.1", Limit: 3, Window: 10 * time.Second,
			Remaining: 3 - i, ResetAfter: 10 * time.Second}
		if diff := cmp.Diff(want, d); diff != "" {
			t.Fatalf("request %d (-want +got):\n%s", i, diff)
		}
	}
	m.FastForward(4 * time.Second)
	d := mustCheck(t, svc, req)
	if d.Allowed || d.ResetAfter != 6*time.Second || d.RetryAfter != 6*time.Second+time.Millisecond {
		t.Fatalf("4th request: %+v, want denied, reset 6s, retry 6.001s", d)
	}
	m.FastForward(6*time.Second + time.Millisecond)
	if d := mustCheck(t, svc, req); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("after the window: %+v, want allowed with 2 remaining", d)
	}
}

func TestCheckRateLimitDenialCache(t *testing.T) {
	_, rdb := newTestRedis(t)
	cc := &countingClient{Client: rdb}
	svc := mustNew(t, cc, rlConfig(ratelimit.DefaultCacheSize, fixed("per-ip", 1, 10*time.Second)))
	req := ratelimit.Request{Policy: "per-ip", Key: "k"}
	mustCheck(t, svc, req)
	first := mustCheck(t, svc, req)
	if first.Allowed || first.Cached {
		t.Fatalf("second request: %+v, want denied by Redis", first)
	}
	before := cc.evals.Load()
	for i := 0; i < 100; i++ {
		d := mustCheck(t, svc, req)
		if d.Allowed || !d.Cached || d.RetryAfter <= 0 || d.RetryAfter > first.RetryAfter {
			t.Fatalf("cached denial %d: %+v", i, d)
		}
	}
	if got := cc.evals.Load() - before; got != 0 {
		t.Errorf("%d script calls reached Redis while the key was known to be denied, want 0", got)
	}
	// Another key, or a cheaper request than the cached one, still asks Redis.
	mustCheck(t, svc, ratelimit.Request{Policy: "per-ip", Key: "other"})
	if got := cc.evals.Load() - before; got != 1 {
		t.Errorf("script calls for another key = %d, want 1", got)
	}
}

func TestCheckRateLimitDenialCacheExpires(t *testing.T) {
	svc, m := newTestService(t, rlConfig(ratelimit.DefaultCacheSize, fixed("per-ip", 1, time.Second)))
	req := ratelimit.Request{Policy: "per-ip", Key: "k"}
	mustCheck(t, svc, req)
	d := mustCheck(t, svc, req)
	if d.Allowed {
		t.Fatal("second request allowed")
	}
	time.Sleep(d.RetryAfter) // the cache runs on the local clock...
	m.FastForward(d.RetryAfter)
	if d := mustCheck(t, svc, req); !d.Allowed || d.Cached {
		t.Fatalf("after retry_after: %+v, want allowed by Redis", d)
	}
}

func TestCheckRateLimitDenialCacheIsBounded(t *testing.T) {
	svc, _ := newTestService(t, rlConfig(10, fixed("per-ip", 1, time.Minute)))
	for i := 0; i < 50; i++ {
		req := ratelimit.Request{Policy: "per-ip", Key: "k" + strconv.Itoa(i)}
		mustCheck(t, svc, req)
		if d := mustCheck(t, svc, req); d.Allowed {
			t.Fatalf("key %d: second request allowed", i)
		}
		if n := ratelimit.DenyCacheLen(svc); n > 10 {
			t.Fatalf("cache holds %d entries, want at most 10", n)
		}
	}
	if n := ratelimit.DenyCacheLen(svc); n != 10 {
		t.Errorf("cache holds %d entries after 50 denied keys, want 10", n)
	}
}

func TestCheckRateLimitFailModes(t *testing.T) {
	open := fixed("open", 5, time.Minute)
	closed := fixed("closed", 5, time.Minute)
	closed.Fail = ratelimit.FailClosed
	reg := prometheus.NewRegistry()
	cfg := rlConfig(ratelimit.DefaultCacheSize, open, closed)
	cfg.Registerer = reg
	cfg.RateLimit.Timeout = 100 * time.Millisecond
	m, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, cfg)
	m.Close()

	d, err := svc.Check(t.Context(), ratelimit.Request{Policy: "open", Key: "k"})
	if err != nil || !d.Allowed || !d.Degraded || d.Remaining != 4 {
		t.Errorf("fail-open: %+v, %v; want allowed, degraded, remaining 4", d, err)
	}
	_, err = svc.Check(t.Context(), ratelimit.Request{Policy: "closed", Key: "k"})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("fail-closed error = %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := svc.Check(ctx, ratelimit.Request{Policy: "open", Key: "k"}); !errors.Is(err, context.Canceled) {
		t.Errorf("caller gone: error = %v, want context.Canceled (no decision for nobody)", err)
	}
}

// An inline token bucket refills within the max window, so the counter one
// request makes is kept no longer than a window; a policy's may take up to
// 10 years. The refused request leaves no key.
func TestInlineBucketRefillsWithinTheMaxWindow(t *testing.T) {
	svc, m := newTestService(t, rlConfig(0, bucket("slow", 1, 24*time.Hour, 2)))
	inline := ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 1, Burst: 2, Window: 24 * time.Hour}
	_, err := svc.Check(t.Context(), ratelimit.Request{Key: "k", Inline: &inline})
	want := "burst × window / limit (the time an empty bucket takes to refill) must be at most 24h0m0s for an inline limit, got 48h0m0s"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("inline bucket refilling in 48h: error = %v, want one containing %q", err, want)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("the refused check left %v, want no key", keys)
	}
	inline.Burst = 1
	if d := mustCheck(t, svc, ratelimit.Request{Key: "k", Inline: &inline}); !d.Allowed {
		t.Errorf("inline bucket refilling in 24h: %+v, want allowed", d)
	}
	if d := mustCheck(t, svc, ratelimit.Request{Policy: "slow", Key: "k"}); !d.Allowed {
		t.Errorf("policy bucket refilling in 48h: %+v, want allowed", d)
	}
}

func TestCheckRateLimitInvalid(t *testing.T) {
	svc, _ := newTestService(t, rlConfig(ratelimit.DefaultCacheSize, fixed("p", 3, time.Minute)))
	noInline := ratelimit.Config{Policies: []ratelimit.Policy{fixed("p", 3, time.Minute)}}
	strict, _ := newTestService(t, config{RateLimit: noInline})
	tests := []struct {
		name        string
		svc         *ratelimit.Service
		req         ratelimit.Request
		field, rule string
	}{
		{"no policy", svc, ratelimit.Request{Key: "k"}, "policy", "required"},
		{"bad key", svc, ratelimit.Request{Policy: "p", Key: "a b"}, "key", "format"},
		{"empty key", svc, ratelimit.Request{Policy: "p"}, "key", "format"},
		{"refund above the limit", svc, ratelimit.Request{Policy: "p", Key: "k", Cost: -4}, "cost", "min"},
		{"inline window above the max window", svc, ratelimit.Request{Key: "k", Inline: &ratelimit.Limit{Limit: 1, Window: 25 * time.Hour}}, "window", "max"},
		{"inline calendar", svc, ratelimit.Request{Key: "k", Inline: &ratelimit.Limit{Limit: 1,
			Calendar: &ratelimit.Calendar{Period: "day"}}}, "calendar", "excluded"},
		{"cost above limit", svc, ratelimit.Request{Policy: "p", Key: "k", Cost: 4}, "cost", "max"},
		{"inline limit 0", svc, ratelimit.Request{Key: "k", Inline: &ratelimit.Limit{Window: time.Second}}, "limit", "min"},
		{"inline cost above burst", svc, ratelimit.Request{Key: "k", Cost: 3,
			Inline: &ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 10, Burst: 2, Window: time.Second}}, "cost", "max"},
		{"inline bucket refilling in over 10 years", svc, ratelimit.Request{Key: "k",
			Inline: &ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 1, Burst: 1_000_000_000, Window: 24 * time.Hour}}, "burst", "max"},
		// An inline counter is kept at most the max window (24h): a bucket
		// that refills in two days would keep one per request for two days.
		{"inline bucket refilling in over the max window", svc, ratelimit.Request{Key: "k",
			Inline: &ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 1, Burst: 2, Window: 24 * time.Hour}}, "burst", "max"},
		{"inline disabled", strict, ratelimit.Request{Key: "k", Inline: &ratelimit.Limit{Limit: 1, Window: time.Second}}, "limit", "disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.svc.Check(t.Context(), tt.req)
			var ve *store.ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.field || ve.Rule != tt.rule {
				t.Errorf("error = %v, want a ValidationError on %s/%s", err, tt.field, tt.rule)
			}
		})
	}
	var nf *ratelimit.PolicyNotFoundError
	if _, err := svc.Check(t.Context(), ratelimit.Request{Policy: "nope", Key: "k"}); !errors.As(err, &nf) || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown policy error = %v, want PolicyNotFoundError wrapping ErrNotFound", err)
	}
}

// BenchmarkCheckRateLimit measures the decision path: a decision answered by
// the script, a denial answered from the in-process cache, and a decision
// answered from a lease's units. redis_calls/op shows what the cache and the
// lease save.
func BenchmarkCheckRateLimit(b *testing.B) {
	for _, bc := range []struct {
		name         string
		limit, lease int64
	}{{"script", 1_000_000_000, 0}, {"cached-denial", 1, 0}, {"leased", 1_000_000_000, 1_000_000}} {
		b.Run(bc.name, func(b *testing.B) {
			m := miniredis.RunT(b)
			rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
			b.Cleanup(func() { _ = rdb.Close() })
			cc := &countingClient{Client: rdb}
			pol := fixed("bench", bc.limit, time.Hour)
			pol.Lease = bc.lease
			svc, err := newService(cc, rlConfig(ratelimit.DefaultCacheSize, pol))
			if err != nil {
				b.Fatal(err)
			}
			req := ratelimit.Request{Policy: "bench", Key: "192.0.2.1"}
			ctx := context.Background()
			if _, err := svc.Check(ctx, req); err != nil {
				b.Fatal(err)
			}
			start := cc.evals.Load()
			b.ResetTimer()
			for b.Loop() {
				if _, err := svc.Check(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cc.evals.Load()-start)/float64(b.N), "redis_calls/op")
		})
	}
}

func sliding(name string, limit int64, window time.Duration) ratelimit.Policy {
	return ratelimit.Policy{Name: name, Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Limit: limit, Window: window}}
}

// swState is what a sliding-window key holds: the index of the current fixed
// window, its count and the previous window's count.
type swState struct{ w, c, p int64 }

// integer is the state in the script's integer form: the digits of w, c and
// p zero-padded to n digits each, then n.
func (s swState) integer() string {
	n := len(strconv.FormatInt(max(s.c, s.p), 10))
	return fmt.Sprintf("%d%0*d%0*d%d", s.w, n, s.c, n, s.p, n)
}

// text is the state in the script's text form, "w:c:p".
func (s swState) text() string { return fmt.Sprintf("%d:%d:%d", s.w, s.c, s.p) }

// swForms write a state in each form a sliding-window key may hold: the hash
// of earlier versions and the script's two string forms.
var swForms = []struct {
	name  string
	write func(m *miniredis.Miniredis, key string, s swState)
}{
	{"hash", func(m *miniredis.Miniredis, key string, s swState) {
		m.HSet(key, "w", strconv.FormatInt(s.w, 10), "c", strconv.FormatInt(s.c, 10), "p", strconv.FormatInt(s.p, 10))
	}},
	{"integer", func(m *miniredis.Miniredis, key string, s swState) { mustSet(m, key, s.integer()) }},
	{"text", func(m *miniredis.Miniredis, key string, s swState) { mustSet(m, key, s.text()) }},
}

func mustSet(m *miniredis.Miniredis, key, value string) {
	if err := m.Set(key, value); err != nil {
		panic(err)
	}
}

// storedState describes a key's type and content, to tell whether a
// decision changed it.
func storedState(t *testing.T, m *miniredis.Miniredis, key string) string {
	t.Helper()
	switch typ := m.Type(key); typ {
	case "hash":
		return fmt.Sprintf("hash w=%s c=%s p=%s", m.HGet(key, "w"), m.HGet(key, "c"), m.HGet(key, "p"))
	case "string":
		v, err := m.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		return v
	default:
		return typ
	}
}

// TestCheckRateLimitSlidingWindowReadsEveryForm decides on a key written in
// each form, the hash of earlier versions included: the decision is the
// same, an allowed request stores the integer form, and a denied one leaves
// the key as it was.
func TestCheckRateLimitSlidingWindowReadsEveryForm(t *testing.T) {
	const limit, window = 10, time.Minute
	cur := t0.UnixMilli() / window.Milliseconds() // t0 starts a window
	tests := []struct {
		name  string
		state swState
		want  ratelimit.Decision // Policy, Key, Limit and Window filled in below
		after swState            // the stored state after an allowed request
	}{
		// A quarter into the window: the previous count weighs 3/4.
		{"current window", swState{cur, 4, 4},
			ratelimit.Decision{Allowed: true, Remaining: 2, ResetAfter: 105 * time.Second}, swState{cur, 5, 4}},
		{"previous window", swState{cur - 1, 8, 2},
			ratelimit.Decision{Allowed: true, Remaining: 3, ResetAfter: 105 * time.Second}, swState{cur, 1, 8}},
		{"older", swState{cur - 2, 9, 9},
			ratelimit.Decision{Allowed: true, Remaining: 9, ResetAfter: 105 * time.Second}, swState{cur, 1, 0}},
		{"clock went back", swState{cur + 1, 4, 0},
			ratelimit.Decision{Allowed: true, Remaining: 5, ResetAfter: 2 * window}, swState{cur + 1, 5, 0}},
		// More than one window ahead is no clock error but a window that was
		// raised: the index counted shorter windows. A fresh window.
		{"two windows ahead", swState{cur + 2, 10, 10},
			ratelimit.Decision{Allowed: true, Remaining: 9, ResetAfter: 105 * time.Second}, swState{cur, 1, 0}},
		{"left by a 1s window", swState{t0.Add(window/4).UnixMilli() / 1000, 10, 0},
			ratelimit.Decision{Allowed: true, Remaining: 9, ResetAfter: 105 * time.Second}, swState{cur, 1, 0}},
		{"full", swState{cur, 10, 0},
			ratelimit.Decision{Remaining: 0, ResetAfter: 105 * time.Second, RetryAfter: 51001 * time.Millisecond}, swState{}},
		{"full with the previous window's weight", swState{cur, 2, 10},
			ratelimit.Decision{Remaining: 0, ResetAfter: 105 * time.Second, RetryAfter: 3001 * time.Millisecond}, swState{}},
	}
	for _, form := range swForms {
		for _, tt := range tests {
			t.Run(form.name+"/"+tt.name, func(t *testing.T) {
				svc, m := newTestService(t, rlConfig(0, sliding("slide", limit, window)))
				m.SetTime(t0.Add(window / 4))
				key := store.DefaultKeyPrefix + "rl:sw:slide:192.0.2.1"
				form.write(m, key, tt.state)
				m.SetTTL(key, 90*time.Second)
				before := storedState(t, m, key)

				got := mustCheck(t, svc, ratelimit.Request{Policy: "slide", Key: "192.0.2.1"})
				want := tt.want
				want.Policy, want.Key, want.Limit, want.Window = "slide", "192.0.2.1", limit, window
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("decision (-want +got):\n%s", diff)
				}
				if !got.Allowed {
					if after := storedState(t, m, key); after != before || m.TTL(key) != 90*time.Second {
						t.Fatalf("a denial changed the key: %s with TTL %s, want %s with TTL 90s", after, m.TTL(key), before)
					}
					return
				}
				if after := storedState(t, m, key); after != tt.after.integer() {
					t.Errorf("stored %q, want %q (%+v)", after, tt.after.integer(), tt.after)
				}
				if ttl := m.TTL(key); ttl != 2*window {
					t.Errorf("TTL = %s, want %s", ttl, 2*window)
				}
			})
		}
	}
}

// TestCheckRateLimitSlidingWindowStoredForm checks which form the script
// stores: the integer while it fits in 64 bits, else the text. A second
// request of the same cost is denied only if the stored counts were read
// back.
func TestCheckRateLimitSlidingWindowStoredForm(t *testing.T) {
	at := func(window time.Duration) int64 { return t0.UnixMilli() / window.Milliseconds() }
	tests := []struct {
		name   string
		limit  int64
		window time.Duration
		want   string
	}{
		{"counts of one digit", 9, time.Minute, swState{at(time.Minute), 9, 0}.integer()},
		{"counts of ten digits", 1_000_000_000, time.Minute, swState{at(time.Minute), 1_000_000_000, 0}.text()},
		// Ten digits of window index, two of four and one: 19 digits.
		{"19 digits below 9e18", 9999, 201 * time.Millisecond, "8932370149999900004"},
		{"19 digits from 9e18", 9999, 196 * time.Millisecond, "9160236734:9999:0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := rlConfig(0, sliding("slide", tt.limit, tt.window))
			cfg.RateLimit.MinWindow = time.Millisecond
			svc, m := newTestService(t, cfg)
			req := ratelimit.Request{Policy: "slide", Key: "192.0.2.1", Cost: tt.limit}
			if d := mustCheck(t, svc, req); !d.Allowed {
				t.Fatalf("first request: %+v, want allowed", d)
			}
			key := store.DefaultKeyPrefix + "rl:sw:slide:192.0.2.1"
			if got := storedState(t, m, key); got != tt.want {
				t.Fatalf("stored %q, want %q", got, tt.want)
			}
			if d := mustCheck(t, svc, req); d.Allowed {
				t.Fatalf("second request: %+v, want denied: the stored counts were not read", d)
			}
			if got := storedState(t, m, key); got != tt.want {
				t.Errorf("after a denial: stored %q, want %q unchanged", got, tt.want)
			}
		})
	}
}

func bucket(name string, limit int64, window time.Duration, burst int64) ratelimit.Policy {
	return ratelimit.Policy{Name: name, Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: limit, Window: window, Burst: burst}}
}

// TestCheckRateLimitTokenBucketCounts checks, on a clock that stands still,
// that a full bucket allows exactly burst requests of cost 1, each reporting
// the whole tokens left, and that waiting retry_after allows one more. It
// covers emission intervals (window / limit) that are not a whole number of
// microseconds, and intervals far below one microsecond.
func TestCheckRateLimitTokenBucketCounts(t *testing.T) {
	tests := []struct {
		limit  int64
		window time.Duration
		burst  int64 // 0: the limit
	}{
		{1, 10 * time.Second, 0},
		{3, 10 * time.Second, 0},
		{6, 10 * time.Second, 0},
		{7, 10 * time.Second, 0},
		{10, 10 * time.Second, 0},
		{11, 10 * time.Second, 0},
		{60, 10 * time.Second, 0},
		{7, time.Second, 3},
		{1000, time.Hour, 0},
		{999_999_937, 24 * time.Hour, 5},
		{4_000_000, time.Second, 4},     // 0.25 µs a token
		{10_000_000, time.Second, 7},    // 0.1 µs a token
		{1_000_000_000, time.Second, 3}, // 1 ns a token
	}
	for _, tt := range tests {
		capacity := tt.burst
		if capacity == 0 {
			capacity = tt.limit
		}
		t.Run(fmt.Sprintf("%d per %s burst %d", tt.limit, tt.window, capacity), func(t *testing.T) {
			svc, m := newTestService(t, rlConfig(0, bucket("tb", tt.limit, tt.window, tt.burst)))
			req := ratelimit.Request{Policy: "tb", Key: "k"}
			for i := int64(1); i <= capacity; i++ {
				d := mustCheck(t, svc, req)
				if !d.Allowed || d.Remaining != capacity-i || d.ResetAfter <= 0 {
					t.Fatalf("request %d: %+v, want allowed with remaining %d and a positive reset", i, d, capacity-i)
				}
			}
			d := mustCheck(t, svc, req)
			if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
				t.Fatalf("request %d of a bucket of %d: %+v, want denied with remaining 0", capacity+1, capacity, d)
			}
			// The bucket was empty: waiting refills retry_after × limit / window.
			wait := d.RetryAfter
			want := min(wait.Milliseconds()*tt.limit/tt.window.Milliseconds(), capacity) - 1
			m.SetTime(t0.Add(wait))
			if d := mustCheck(t, svc, req); !d.Allowed || d.Remaining != want {
				t.Fatalf("after retry_after %s: %+v, want allowed with remaining %d", wait, d, want)
			}
		})
	}
}

// TestCheckRateLimitTokenBucketHighRate checks a bucket refilling at 10
// million tokens a second (0.1 µs a token): the first request of a full
// bucket is allowed and takes exactly one token, and the key lives until the
// bucket is full again.
func TestCheckRateLimitTokenBucketHighRate(t *testing.T) {
	svc, m := newTestService(t, rlConfig(0, bucket("fast", 10_000_000, time.Second, 0)))
	req := ratelimit.Request{Policy: "fast", Key: "k"}
	for i := int64(1); i <= 3; i++ {
		d := mustCheck(t, svc, req)
		if !d.Allowed || d.Remaining != 10_000_000-i || d.ResetAfter != time.Millisecond {
			t.Fatalf("request %d: %+v, want allowed with remaining %d, reset 1ms", i, d, 10_000_000-i)
		}
	}
	key := store.DefaultKeyPrefix + "rl:tb:fast:k"
	if ttl := m.TTL(key); ttl != time.Millisecond {
		t.Errorf("TTL = %s, want 1ms", ttl)
	}
}

// TestCheckRateLimitTokenBucketStoredForm checks the stored theoretical
// arrival time: an integer of nanoseconds, rounded up to a whole ns, that
// reads back exactly; and the microsecond forms earlier versions wrote, an
// integer or a decimal, still read.
func TestCheckRateLimitTokenBucketStoredForm(t *testing.T) {
	now := t0.UnixMicro()
	us := func(d int64) string { return strconv.FormatInt(now+d, 10) }                   // µs from now, as earlier versions wrote it
	ns := func(d int64, sub string) string { return strconv.FormatInt(now+d, 10) + sub } // d µs and sub ns from now
	tests := []struct {
		name   string
		limit  int64
		window time.Duration
		burst  int64  // 0: the limit
		stored string // before the request; "" for none
		want   string // "": stored, unchanged by a denial
		remain int64
	}{
		{"whole microseconds", 10, 10 * time.Second, 0, "", ns(1_000_000, "000"), 9},
		{"a seventh of a second, rounded up", 7, time.Second, 0, "", ns(142857, "143"), 6},
		{"two sevenths, read back exactly", 7, time.Second, 0, ns(142857, "143"), ns(285714, "286"), 5},
		{"a third of 10s", 3, 10 * time.Second, 0, ns(3333333, "334"), ns(6666666, "667"), 1},
		{"a decimal from an earlier version", 7, time.Second, 0, us(142857) + ".14", ns(285714, "286"), 5},
		{"an integer from an earlier version", 7, time.Second, 0, us(142857), ns(285714, "143"), 5},
		{"in the past", 7, time.Second, 0, us(-5_000_000), ns(142857, "143"), 6},
		{"in the past, in ns", 7, time.Second, 0, ns(-1, "999"), ns(142857, "143"), 6},
		{"garbage", 7, time.Second, 0, "x", ns(142857, "143"), 6},
		// Above 1000 tokens a window, a token takes window / limit rounded
		// up to a whole ns: 999000.999 ns here.
		{"1001 a second", 1001, time.Second, 0, ns(999, "001"), ns(1998, "002"), 999},
		// Below 1 ns a token, the stored time is rounded up to the ns: 0.1
		// ns a token, read back as 1 ns, so the second request takes 11.
		{"a tenth of a ns", 10_000_000_000, time.Second, 0, ns(0, "001"), ns(0, "002"), 10_000_000_000 - 11},
		// An earlier version could store a time centuries ahead (a refill time
		// beyond what is now allowed); it counts as no key, whether its
		// digits read as µs or, 18 and more, as ns (this one: in 2243).
		{"centuries ahead", 7, time.Second, 0, "8641795455188881408", ns(142857, "143"), 6},
		{"centuries ahead in µs", 7, time.Second, 0, "86417954551888814", ns(142857, "143"), 6},
		{"eleven years ahead in ns", 7, time.Second, 0, ns(11*365*86_400_000_000, "000"), ns(142857, "143"), 6},
		// A refill of 10 years with the interval rounded up ends a little
		// after 10 years; an empty bucket there is still empty.
		{"empty after 10 years", 1001, 24 * time.Hour, 3_653_650, ns(10*365*86_400_000_000+1000, "000"), "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := rlConfig(0, bucket("tb", tt.limit, tt.window, tt.burst))
			cfg.RateLimit.MaxLimit = 1 << 40
			svc, m := newTestService(t, cfg)
			key := store.DefaultKeyPrefix + "rl:tb:tb:k"
			if tt.stored != "" {
				mustSet(m, key, tt.stored)
			}
			d := mustCheck(t, svc, ratelimit.Request{Policy: "tb", Key: "k"})
			want := tt.want
			if want == "" {
				want = tt.stored
				if d.Allowed || d.Remaining != 0 {
					t.Fatalf("decision %+v, want denied with remaining 0", d)
				}
			} else if !d.Allowed || d.Remaining != tt.remain {
				t.Fatalf("decision %+v, want allowed with remaining %d", d, tt.remain)
			}
			if got := storedState(t, m, key); got != want {
				t.Errorf("stored %q, want %q", got, want)
			}
		})
	}
}

// gcraModel is the token bucket in exact rational arithmetic, the reference
// the script must match reply for reply. A token takes window / limit, but
// above 1000 tokens a window and 1 ns a token it takes that rounded up to a
// whole ns. The stored time is rounded up to the ns and read back as the
// last tick (1/limit µs, or 1 ns for a rounded interval) at or before it:
// exactly what was stored, unless a tick is below 1 ns.
type gcraModel struct {
	limit, windowMS, burst int64
	tat                    *big.Rat // microseconds; nil: no key
}

// decide answers a request of cost at now (µs) as the script must:
// {allowed, remaining, reset_ms, retry_after_ms}.
func (g *gcraModel) decide(now, cost int64) [4]int64 {
	rat := func(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }
	floor := func(r *big.Rat) int64 { return new(big.Int).Quo(r.Num(), r.Denom()).Int64() } // r >= 0
	// ceil rounds r >= 0 up to an integer.
	ceil := func(r *big.Rat) *big.Int {
		n := new(big.Int).Quo(r.Num(), r.Denom())
		if !r.IsInt() {
			n.Add(n, big.NewInt(1))
		}
		return n
	}
	ceilMS := func(us *big.Rat) int64 { return ceil(new(big.Rat).Quo(us, rat(1000))).Int64() }
	interval := new(big.Rat).SetFrac64(g.windowMS*1000, g.limit)
	unit := g.limit // ticks a µs
	if g.limit > 1000 && g.windowMS*1_000_000 >= g.limit {
		unit = 1000
		interval.SetFrac(ceil(new(big.Rat).SetFrac64(g.windowMS*1_000_000, g.limit)), big.NewInt(1000))
	}
	tol := new(big.Rat).Mul(interval, rat(g.burst))
	off := new(big.Rat)
	if g.tat != nil && g.tat.Cmp(rat(now)) > 0 {
		off.Sub(g.tat, rat(now))
	}
	newOff := new(big.Rat).Add(off, new(big.Rat).Mul(interval, rat(cost)))
	if newOff.Cmp(tol) > 0 {
		var remaining int64
		if off.Cmp(tol) <= 0 {
			remaining = floor(new(big.Rat).Quo(new(big.Rat).Sub(tol, off), interval))
		}
		return [4]int64{0, remaining, ceilMS(off), ceilMS(new(big.Rat).Sub(newOff, tol)) + 1}
	}
	storedNS := ceil(new(big.Rat).Mul(new(big.Rat).Add(rat(now), newOff), rat(1000)))
	ticks := new(big.Int).Quo(new(big.Int).Mul(storedNS, big.NewInt(unit)), big.NewInt(1000))
	g.tat = new(big.Rat).SetFrac(ticks, big.NewInt(unit))
	return [4]int64{1, floor(new(big.Rat).Quo(new(big.Rat).Sub(tol, newOff), interval)), ceilMS(newOff), 0}
}

// TestTokenBucketScriptMatchesExactModel runs the token bucket script on
// random limits, windows, bursts, costs and request times, and checks every
// reply against gcraModel. The limits span 1 to 1e9 and the refill times up
// to 10 years, so products far beyond 2^53 (the exact range of a Lua number)
// are covered; a few limits above 1e9 give tokens below 1 ns.
func TestTokenBucketScriptMatchesExactModel(t *testing.T) {
	m, rdb := newTestRedis(t)
	script := redis.NewScript(lua.Source("ratelimit_token_bucket"))
	rng := rand.New(rand.NewPCG(7, 11))
	logUniform := func(lo, hi float64) int64 { return int64(lo * math.Pow(hi/lo, rng.Float64())) }
	configs := 200
	if testing.Short() {
		configs = 20
	}
	var models []*gcraModel
	for c := 0; c < configs; c++ {
		g := &gcraModel{limit: max(logUniform(1, 1.5e9), 1), windowMS: logUniform(1000, 86_400_001)}
		switch c % 3 {
		case 0:
			g.burst = g.limit
		case 1:
			g.burst = max(logUniform(1, float64(g.limit)), 1)
		default:
			g.burst = max(logUniform(1, 1e9), 1)
		}
		g.limit, g.burst = min(g.limit, 1_000_000_000), min(g.burst, 1_000_000_000)
		l := ratelimit.Policy{Name: "p", Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: g.limit,
			Window: time.Duration(g.windowMS) * time.Millisecond, Burst: g.burst}}
		if (ratelimit.Config{Policies: []ratelimit.Policy{l}}).Validate() != nil {
			continue // a refill beyond 10 years
		}
		models = append(models, g)
	}
	models = append(models,
		&gcraModel{limit: 3_000_000_007, windowMS: 1000, burst: 50},
		&gcraModel{limit: 1 << 40, windowMS: 1000, burst: 1 << 40},
		&gcraModel{limit: 1<<48 - 1, windowMS: 7001, burst: 1_000_000_000})
	for c, g := range models {
		key := fmt.Sprintf("tb:%d", c)
		// Steps of up to two emission intervals in whole microseconds, a
		// third of them 0 (requests within the same microsecond), and after a
		// denial sometimes exactly its retry_after.
		step := max(g.windowMS*1000*2/g.limit, 1)
		now := t0.UnixMicro()
		var last [4]int64
		for i := 0; i < 40; i++ {
			cost := int64(1)
			if rng.IntN(3) == 0 {
				cost = 1 + rng.Int64N(g.burst)
			}
			switch {
			case i == 0 || rng.IntN(3) == 0:
			case last[0] == 0 && rng.IntN(2) == 0:
				now += last[3] * 1000
			default:
				now += rng.Int64N(step + 1)
			}
			m.SetTime(time.UnixMicro(now))
			want := g.decide(now, cost)
			got, err := script.Run(t.Context(), rdb, []string{key}, g.limit, g.windowMS, g.burst, cost).Int64Slice()
			if err != nil || len(got) != 4 || [4]int64(got) != want {
				t.Fatalf("limit %d per %dms, burst %d, request %d of cost %d at +%dµs: reply %v, %v; want %v (stored %q)",
					g.limit, g.windowMS, g.burst, i, cost, now-t0.UnixMicro(), got, err, want, storedState(t, m, key))
			}
			last = want
		}
	}
}
