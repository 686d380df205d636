package service_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service"
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

func rlConfig(cacheSize int, ps ...service.Policy) service.Config {
	return service.Config{RateLimit: service.RateLimitConfig{Policies: ps, AllowInline: true, CacheSize: cacheSize}}
}

func fixed(name string, limit int64, window time.Duration) service.Policy {
	return service.Policy{Name: name, Limit: service.Limit{Algorithm: service.FixedWindow, Limit: limit, Window: window}}
}

func mustCheck(t testing.TB, svc *service.Service, req service.RateLimitRequest) service.Decision {
	t.Helper()
	d, err := svc.CheckRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("CheckRateLimit(%+v): %v", req, err)
	}
	return d
}

func TestCheckRateLimitFixedWindow(t *testing.T) {
	svc, m := newTestService(t, rlConfig(-1, fixed("per-ip", 3, 10*time.Second)))
	req := service.RateLimitRequest{Policy: "per-ip", Key: "192.0.2.1"}
	for i := int64(1); i <= 3; i++ {
		d := mustCheck(t, svc, req)
		want := service.Decision{Allowed: true, Policy: "per-ip", Key: "192.0.2.1", Limit: 3, Window: 10 * time.Second,
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
	svc := mustNew(t, cc, rlConfig(0, fixed("per-ip", 1, 10*time.Second)))
	req := service.RateLimitRequest{Policy: "per-ip", Key: "k"}
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
	mustCheck(t, svc, service.RateLimitRequest{Policy: "per-ip", Key: "other"})
	if got := cc.evals.Load() - before; got != 1 {
		t.Errorf("script calls for another key = %d, want 1", got)
	}
}

func TestCheckRateLimitDenialCacheExpires(t *testing.T) {
	svc, m := newTestService(t, rlConfig(0, fixed("per-ip", 1, time.Second)))
	req := service.RateLimitRequest{Policy: "per-ip", Key: "k"}
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
		req := service.RateLimitRequest{Policy: "per-ip", Key: "k" + strconv.Itoa(i)}
		mustCheck(t, svc, req)
		if d := mustCheck(t, svc, req); d.Allowed {
			t.Fatalf("key %d: second request allowed", i)
		}
		if n := service.DenyCacheLen(svc); n > 10 {
			t.Fatalf("cache holds %d entries, want at most 10", n)
		}
	}
	if n := service.DenyCacheLen(svc); n != 10 {
		t.Errorf("cache holds %d entries after 50 denied keys, want 10", n)
	}
}

func TestCheckRateLimitFailModes(t *testing.T) {
	open := fixed("open", 5, time.Minute)
	closed := fixed("closed", 5, time.Minute)
	closed.Fail = service.FailClosed
	reg := prometheus.NewRegistry()
	cfg := rlConfig(0, open, closed)
	cfg.Registerer = reg
	cfg.RateLimit.Timeout = 100 * time.Millisecond
	m, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, cfg)
	m.Close()

	d, err := svc.CheckRateLimit(t.Context(), service.RateLimitRequest{Policy: "open", Key: "k"})
	if err != nil || !d.Allowed || !d.Degraded || d.Remaining != 4 {
		t.Errorf("fail-open: %+v, %v; want allowed, degraded, remaining 4", d, err)
	}
	_, err = svc.CheckRateLimit(t.Context(), service.RateLimitRequest{Policy: "closed", Key: "k"})
	if !errors.Is(err, service.ErrUnavailable) {
		t.Errorf("fail-closed error = %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := svc.CheckRateLimit(ctx, service.RateLimitRequest{Policy: "open", Key: "k"}); !errors.Is(err, context.Canceled) {
		t.Errorf("caller gone: error = %v, want context.Canceled (no decision for nobody)", err)
	}
}

func TestCheckRateLimitInvalid(t *testing.T) {
	svc, _ := newTestService(t, rlConfig(0, fixed("p", 3, time.Minute)))
	noInline := service.RateLimitConfig{Policies: []service.Policy{fixed("p", 3, time.Minute)}}
	strict, _ := newTestService(t, service.Config{RateLimit: noInline})
	tests := []struct {
		name        string
		svc         *service.Service
		req         service.RateLimitRequest
		field, rule string
	}{
		{"no policy", svc, service.RateLimitRequest{Key: "k"}, "policy", "required"},
		{"bad key", svc, service.RateLimitRequest{Policy: "p", Key: "a b"}, "key", "format"},
		{"empty key", svc, service.RateLimitRequest{Policy: "p"}, "key", "format"},
		{"negative cost", svc, service.RateLimitRequest{Policy: "p", Key: "k", Cost: -1}, "cost", "min"},
		{"cost above limit", svc, service.RateLimitRequest{Policy: "p", Key: "k", Cost: 4}, "cost", "max"},
		{"inline limit 0", svc, service.RateLimitRequest{Key: "k", Inline: &service.Limit{Window: time.Second}}, "limit", "min"},
		{"inline cost above burst", svc, service.RateLimitRequest{Key: "k", Cost: 3,
			Inline: &service.Limit{Algorithm: service.TokenBucket, Limit: 10, Burst: 2, Window: time.Second}}, "cost", "max"},
		{"inline disabled", strict, service.RateLimitRequest{Key: "k", Inline: &service.Limit{Limit: 1, Window: time.Second}}, "limit", "disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.svc.CheckRateLimit(t.Context(), tt.req)
			var ve *service.ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.field || ve.Rule != tt.rule {
				t.Errorf("error = %v, want a ValidationError on %s/%s", err, tt.field, tt.rule)
			}
		})
	}
	var nf *service.PolicyNotFoundError
	if _, err := svc.CheckRateLimit(t.Context(), service.RateLimitRequest{Policy: "nope", Key: "k"}); !errors.As(err, &nf) || !errors.Is(err, service.ErrNotFound) {
		t.Errorf("unknown policy error = %v, want PolicyNotFoundError wrapping ErrNotFound", err)
	}
}

// BenchmarkCheckRateLimit measures the decision path: a decision answered by
// the script, and a denial answered from the in-process cache. redis_calls/op
// shows what the cache saves.
func BenchmarkCheckRateLimit(b *testing.B) {
	for _, bc := range []struct {
		name  string
		limit int64
	}{{"script", 1_000_000_000}, {"cached-denial", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			m := miniredis.RunT(b)
			rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
			b.Cleanup(func() { _ = rdb.Close() })
			cc := &countingClient{Client: rdb}
			svc, err := service.New(cc, rlConfig(0, fixed("bench", bc.limit, time.Hour)))
			if err != nil {
				b.Fatal(err)
			}
			req := service.RateLimitRequest{Policy: "bench", Key: "192.0.2.1"}
			ctx := context.Background()
			if _, err := svc.CheckRateLimit(ctx, req); err != nil {
				b.Fatal(err)
			}
			start := cc.evals.Load()
			b.ResetTimer()
			for b.Loop() {
				if _, err := svc.CheckRateLimit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cc.evals.Load()-start)/float64(b.N), "redis_calls/op")
		})
	}
}

func sliding(name string, limit int64, window time.Duration) service.Policy {
	return service.Policy{Name: name, Limit: service.Limit{Algorithm: service.SlidingWindow, Limit: limit, Window: window}}
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
		want  service.Decision // Policy, Key, Limit and Window filled in below
		after swState          // the stored state after an allowed request
	}{
		// A quarter into the window: the previous count weighs 3/4.
		{"current window", swState{cur, 4, 4},
			service.Decision{Allowed: true, Remaining: 2, ResetAfter: 105 * time.Second}, swState{cur, 5, 4}},
		{"previous window", swState{cur - 1, 8, 2},
			service.Decision{Allowed: true, Remaining: 3, ResetAfter: 105 * time.Second}, swState{cur, 1, 8}},
		{"older", swState{cur - 2, 9, 9},
			service.Decision{Allowed: true, Remaining: 9, ResetAfter: 105 * time.Second}, swState{cur, 1, 0}},
		{"clock went back", swState{cur + 1, 4, 0},
			service.Decision{Allowed: true, Remaining: 5, ResetAfter: 2 * window}, swState{cur + 1, 5, 0}},
		{"full", swState{cur, 10, 0},
			service.Decision{Remaining: 0, ResetAfter: 105 * time.Second, RetryAfter: 51001 * time.Millisecond}, swState{}},
		{"full with the previous window's weight", swState{cur, 2, 10},
			service.Decision{Remaining: 0, ResetAfter: 105 * time.Second, RetryAfter: 3001 * time.Millisecond}, swState{}},
	}
	for _, form := range swForms {
		for _, tt := range tests {
			t.Run(form.name+"/"+tt.name, func(t *testing.T) {
				svc, m := newTestService(t, rlConfig(-1, sliding("slide", limit, window)))
				m.SetTime(t0.Add(window / 4))
				key := service.DefaultKeyPrefix + "rl:sw:slide:192.0.2.1"
				form.write(m, key, tt.state)
				m.SetTTL(key, 90*time.Second)
				before := storedState(t, m, key)

				got := mustCheck(t, svc, service.RateLimitRequest{Policy: "slide", Key: "192.0.2.1"})
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
			cfg := rlConfig(-1, sliding("slide", tt.limit, tt.window))
			cfg.RateLimit.MinWindow = time.Millisecond
			svc, m := newTestService(t, cfg)
			req := service.RateLimitRequest{Policy: "slide", Key: "192.0.2.1", Cost: tt.limit}
			if d := mustCheck(t, svc, req); !d.Allowed {
				t.Fatalf("first request: %+v, want allowed", d)
			}
			key := service.DefaultKeyPrefix + "rl:sw:slide:192.0.2.1"
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
