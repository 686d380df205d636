package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// instantRedis answers every script call at once, so a benchmark
// of the router measures Latchkey's own work on the hot path (routing,
// middleware, identity, the service, headers and body) without a network.
type instantRedis struct {
	*redis.Client // never dialled: only the methods below are called
}

// EvalSha answers as the script with that many keys would: acquire (7
// keys) a new grant, release (5) the last hold gone, a rate-limit
// script (1) an allowed decision.
func (r *instantRedis) EvalSha(ctx context.Context, _ string, keys []string, _ ...any) *redis.Cmd {
	switch len(keys) {
	case 7:
		return redis.NewCmdResult([]any{int64(1), int64(1), int64(42), int64(10000), time.Now().UnixMilli(),
			int64(0), int64(0), int64(0), int64(0)}, nil)
	case 5:
		return redis.NewCmdResult([]any{int64(1), int64(0)}, nil)
	default:
		return redis.NewCmdResult([]any{int64(1), int64(999), int64(60000), int64(0)}, nil)
	}
}

func (r *instantRedis) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	return redis.NewStringResult("", nil)
}

// BenchmarkHotPath runs the hot routes through the whole router: the
// ceiling route, a gate decision, a JSON check, and a lock's acquire and
// release. Their difference from the ceiling is what a request costs
// Latchkey beyond serving HTTP; allocs/op is exact and does not depend on
// the machine's load.
func BenchmarkHotPath(b *testing.B) {
	rdb := &instantRedis{Client: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})}
	b.Cleanup(func() { _ = rdb.Client.Close() })
	st, err := store.New(rdb, store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	lk, err := locks.New(st, locks.Config{})
	if err != nil {
		b.Fatal(err)
	}
	rl, err := ratelimit.New(st, ratelimit.Config{CacheSize: ratelimit.DefaultCacheSize, Policies: []ratelimit.Policy{{
		Name: "bench", Key: "ip", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 1000, Window: time.Minute},
	}}})
	if err != nil {
		b.Fatal(err)
	}
	trusted, err := handlers.ParseTrustedProxies("127.0.0.1/32")
	if err != nil {
		b.Fatal(err)
	}
	router := handlers.NewRouter(lk, rl, handlers.Config{
		RateLimit: handlers.RateLimitConfig{ClientIP: handlers.ClientIPConfig{TrustedProxies: trusted}},
	})
	cases := []struct {
		name string
		req  func() *http.Request
		want int
	}{
		{"ceiling", func() *http.Request { return httptest.NewRequest(http.MethodGet, "/healthz", nil) }, http.StatusOK},
		{"gate", func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, "/v1/ratelimit/gate/bench", nil)
			r.RemoteAddr = "127.0.0.1:40000"
			r.Header.Set("X-Forwarded-For", "10.1.2.3")
			return r
		}, http.StatusOK},
		{"check", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/v1/ratelimit/check", strings.NewReader(`{"policy":"bench","key":"user-1"}`))
			r.Header.Set("Content-Type", "application/json")
			return r
		}, http.StatusOK},
		{"acquire", func() *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/v1/locks/orders-42", strings.NewReader(`{"ttl":"10s"}`))
			r.Header.Set("Content-Type", "application/json")
			return r
		}, http.StatusCreated},
		{"release", func() *http.Request {
			r := httptest.NewRequest(http.MethodDelete, "/v1/locks/orders-42", nil)
			r.Header.Set("Lock-Token", "bench-token-0123456789abcdef")
			return r
		}, http.StatusOK},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				req, w := bc.req(), httptest.NewRecorder()
				b.StartTimer()
				router.ServeHTTP(w, req)
				if w.Code != bc.want {
					b.Fatalf("status %d, want %d: %s", w.Code, bc.want, w.Body)
				}
			}
		})
	}
}
