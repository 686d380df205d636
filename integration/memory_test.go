package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// Redis memory budgets, measured with MEMORY USAGE on real Redis with the
// default key prefix: every key a held lock uses, and the one key of a
// rate-limit decision.
const (
	maxBytesPerHeldLock     = 250
	maxBytesPerRateLimitKey = 100
	// maxBytesPerKeepaliveLease guards a keep-alive lease: its bounds and its
	// entry in the renewal registry (a sorted set member naming token and
	// lock) come on top of a held lock's keys, so it is above the held-lock
	// budget; docs/performance.md says by how much.
	maxBytesPerKeepaliveLease = 450
)

// memoryOf sums MEMORY USAGE over the keys matching pattern and returns the
// keys it measured. A key that expires between KEYS and MEMORY USAGE (a
// short rate-limit window on a slow machine) is left out of both.
func memoryOf(t *testing.T, rdb redis.UniversalClient, pattern string) (total int64, measured []string) {
	t.Helper()
	for _, k := range allKeys(t, rdb, pattern) {
		n, err := rdb.MemoryUsage(t.Context(), k, 0).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", k, err)
		}
		total += n
		measured = append(measured, k)
	}
	return total, measured
}

func TestMemoryPerHeldLock(t *testing.T) {
	_, url := startRedisContainer(t)
	rdb := newClient(t, url)
	svc := newTestEnv(t, withRedisClient(rdb, url), withPrefix(store.DefaultKeyPrefix), unloaded()).Svc
	cases := []struct {
		name   string
		req    locks.AcquireRequest
		budget int // bytes per lock, its share of shared keys included
	}{
		{"plain", locks.AcquireRequest{TTL: 30 * time.Second}, maxBytesPerHeldLock},
		{"fair", locks.AcquireRequest{TTL: 30 * time.Second, Fair: true}, maxBytesPerHeldLock},
		// A keep-alive lease also carries its bounds and an entry in the
		// shared renewal registry.
		{"keepalive", locks.AcquireRequest{TTL: 30 * time.Second, Keepalive: true, MaxHold: time.Hour, Heartbeat: time.Minute},
			maxBytesPerKeepaliveLease},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const n = 200
			for i := range n {
				if _, err := svc.Acquire(t.Context(), fmt.Sprintf("%s-invoice-%06d", tc.name, i), tc.req); err != nil {
					t.Fatal(err)
				}
			}
			total, keys := memoryOf(t, rdb, "latchkey:*{"+tc.name+"-invoice-*")
			shared, _ := memoryOf(t, rdb, "latchkey:keepalive") // the registry: only keep-alive leases are in it
			per := float64(total+shared) / n
			t.Logf("%s: %d keys for %d held locks, %.0f bytes per lock (budget %d)", tc.name, len(keys), n, per, tc.budget)
			if per > float64(tc.budget) {
				t.Errorf("%s: %.0f bytes per held lock, want at most %d", tc.name, per, tc.budget)
			}
			if err := rdb.Del(t.Context(), append(keys, "latchkey:keepalive")...).Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// maxBytesPerOneOffName is the Redis memory budget of a name used once
// (MEMORY USAGE on real Redis, the default key prefix, a name of 20
// characters): what a released lock, read lease or semaphore lease, or an
// inline rate-limit check, leaves behind until its retention ends. The
// README's worst case for an anonymous client multiplies it.
const maxBytesPerOneOffName = 128

// TestMemoryPerOneOffName measures what a name used once and let go leaves
// in Redis: one key (a fence counter, a semaphore's capacity record, an
// inline limit's counter) within the budget, that ends by itself within the
// fence retention (the inline counter: within its window).
func TestMemoryPerOneOffName(t *testing.T) {
	_, url := startRedisContainer(t)
	rdb := newClient(t, url)
	svc := newTestEnv(t, withRedisClient(rdb, url), withPrefix(store.DefaultKeyPrefix), unloaded(),
		withServiceConfig(func(s *serviceConfig) { s.RateLimit.AllowInline = true })).Svc
	retention := svc.lockService.Config().FenceTTL
	const window = 24 * time.Hour // the longest inline window
	cases := []struct {
		name string
		use  func(t *testing.T, name string)
		keep time.Duration // the longest the key may live
	}{
		{"lock", func(t *testing.T, name string) {
			l, err := svc.Acquire(t.Context(), name, locks.AcquireRequest{TTL: time.Minute})
			if err == nil {
				_, err = svc.Release(t.Context(), name, l.Token)
			}
			if err != nil {
				t.Fatal(err)
			}
		}, retention},
		{"rwlock", func(t *testing.T, name string) {
			l, err := svc.AcquireRW(t.Context(), name, locks.AcquireRequest{Mode: locks.ModeRead, TTL: time.Minute})
			if err == nil {
				_, err = svc.ReleaseRW(t.Context(), name, l.Token, locks.ModeRead)
			}
			if err != nil {
				t.Fatal(err)
			}
		}, retention},
		{"semaphore", func(t *testing.T, name string) {
			req := locks.SemaphoreRequest{AcquireRequest: locks.AcquireRequest{TTL: time.Minute}, Permits: 5, Count: 1}
			l, err := svc.AcquireSemaphore(t.Context(), name, req)
			if err == nil {
				_, err = svc.ReleaseSemaphore(t.Context(), name, l.Token)
			}
			if err != nil {
				t.Fatal(err)
			}
		}, retention},
		{"inline", func(t *testing.T, name string) {
			l := ratelimit.Limit{Limit: 5, Window: window}
			if _, err := svc.Check(t.Context(), ratelimit.Request{Key: name, Inline: &l}); err != nil {
				t.Fatal(err)
			}
		}, window},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const n = 200
			for i := range n {
				tc.use(t, fmt.Sprintf("%s-once-%0*d", tc.name, 20-len(tc.name+"-once-"), i)) // 20 characters
			}
			total, keys := memoryOf(t, rdb, "latchkey:*"+tc.name+"-once-*")
			defer rdb.Del(context.Background(), keys...)
			per := float64(total) / n
			t.Logf("%s: %d keys for %d one-off names, %.0f bytes per name (budget %d)", tc.name, len(keys), n, per, maxBytesPerOneOffName)
			if len(keys) != n {
				t.Errorf("%s: %d keys for %d one-off names, want one each: %q", tc.name, len(keys), n, keys[:min(len(keys), 5)])
			}
			if per > maxBytesPerOneOffName {
				t.Errorf("%s: %.0f bytes per one-off name, want at most %d", tc.name, per, maxBytesPerOneOffName)
			}
			for _, k := range keys {
				if ttl, err := rdb.PTTL(t.Context(), k).Result(); err != nil || ttl <= 0 || ttl > tc.keep {
					t.Fatalf("%s: TTL %s (%v), want at most %s", k, ttl, err, tc.keep)
				}
			}
		})
	}
}

func TestMemoryPerRateLimitKey(t *testing.T) {
	_, url := startRedisContainer(t)
	rdb := newClient(t, url)
	// Every algorithm keeps one integer in its key: a counter, a TAT, or
	// the sliding window's two counters and window index packed together.
	// The token bucket is measured with a whole and a fractional number of
	// µs a token: its TAT is an integer either way.
	policies := []ratelimit.Policy{
		{Name: "per-ip", Key: "ip", DenyStatus: 429,
			Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 100, Window: time.Minute}},
		{Name: "per-ip", Key: "ip", DenyStatus: 429,
			Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 100, Window: time.Minute, Burst: 20}},
		{Name: "per-ip", Key: "ip", DenyStatus: 429,
			Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 3, Window: 10 * time.Second, Burst: 3}},
		{Name: "per-ip", Key: "ip", DenyStatus: 429,
			Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Limit: 100, Window: time.Minute}},
	}
	for _, p := range policies {
		t.Run(fmt.Sprintf("%s %d per %s", p.Limit.Algorithm, p.Limit.Limit, p.Limit.Window), func(t *testing.T) {
			svc := newTestEnv(t, withRedisClient(rdb, url), withPrefix(store.DefaultKeyPrefix), unloaded(), withServiceConfig(func(s *serviceConfig) {
				s.RateLimit = ratelimit.Config{CacheSize: ratelimit.DefaultCacheSize, Policies: []ratelimit.Policy{p}}
			})).Svc
			const n = 200
			for i := range n {
				// Clients as the gate keys them: IPv4 addresses and IPv6 /64 networks.
				key := fmt.Sprintf("198.51.%d.%d", i/256, i%256)
				if i%2 == 1 {
					key = fmt.Sprintf("2001:db8:%x:%x::/64", i*7919%65536, i)
				}
				if _, err := svc.Check(t.Context(), ratelimit.Request{Policy: "per-ip", Key: key}); err != nil {
					t.Fatal(err)
				}
			}
			total, keys := memoryOf(t, rdb, "latchkey:rl:*")
			defer rdb.Del(context.Background(), keys...)
			if len(keys) == 0 {
				t.Fatal("no rate-limit keys written")
			}
			per := float64(total) / float64(len(keys))
			t.Logf("%s: %d keys, %.0f bytes per key (budget %d)", p.Limit.Algorithm, len(keys), per, maxBytesPerRateLimitKey)
			if per > maxBytesPerRateLimitKey {
				t.Errorf("%s: %.0f bytes per rate-limit key, want at most %d", p.Limit.Algorithm, per, maxBytesPerRateLimitKey)
			}
		})
	}
}

// maxBytesPerReadLease is the Redis memory budget of a held read lease of a
// read/write lock, among the lock's readers: its field in the lock's state
// hash and its member in the readers zset.
const maxBytesPerReadLease = 250

// TestMemoryPerReadLease measures held read leases: many readers of one lock
// (the budget applies: each lease's share of the lock's keys), and one
// reader per lock (every key of the lock counts against the lease: logged,
// docs/performance.md reports it).
func TestMemoryPerReadLease(t *testing.T) {
	_, url := startRedisContainer(t)
	rdb := newClient(t, url)
	svc := newTestEnv(t, withRedisClient(rdb, url), withPrefix(store.DefaultKeyPrefix), unloaded()).Svc
	read := locks.AcquireRequest{Mode: locks.ModeRead, TTL: 30 * time.Second}
	cases := []struct {
		name   string
		lock   func(i int) string
		count  int
		budget int // 0: measured and logged only
	}{
		{"shared", func(int) string { return "shared-catalog" }, 200, maxBytesPerReadLease},
		{"few", func(i int) string { return fmt.Sprintf("few-catalog-%02d", i%20) }, 200, maxBytesPerReadLease},
		{"alone", func(i int) string { return fmt.Sprintf("alone-catalog-%06d", i) }, 200, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.count {
				if _, err := svc.AcquireRW(t.Context(), tc.lock(i), read); err != nil {
					t.Fatal(err)
				}
			}
			total, keys := memoryOf(t, rdb, "latchkey:rw:*{"+tc.name+"-catalog*")
			per := float64(total) / float64(tc.count)
			t.Logf("%s: %d keys for %d read leases, %.0f bytes per read lease (budget %d)", tc.name, len(keys), tc.count, per, tc.budget)
			if tc.budget > 0 && per > float64(tc.budget) {
				t.Errorf("%s: %.0f bytes per held read lease, want at most %d", tc.name, per, tc.budget)
			}
		})
	}
}
