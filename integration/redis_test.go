package integration

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// Environment that tells the tests where Redis is and whether it is required.
const (
	envRedisURL     = "LATCHKEY_TEST_REDIS_URL"   // use this Redis instead of a container
	envRedisImage   = "LATCHKEY_TEST_REDIS_IMAGE" // image for testcontainers (default redis:7)
	envRequireRedis = "LATCHKEY_REQUIRE_REDIS"    // "1": fail instead of skipping when no Redis can be had
)

func required() bool {
	b, _ := strconv.ParseBool(os.Getenv(envRequireRedis))
	return b
}

// skipOrFail skips the test with the reason, or fails it when the
// environment requires Redis and Docker (as CI does).
func skipOrFail(t testing.TB, reason string) {
	t.Helper()
	if required() {
		t.Fatalf("%s (and %s=1 requires it)", reason, envRequireRedis)
	}
	t.Skip(reason)
}

// startRedisContainer starts a fresh Redis container for t and returns it
// with its URL. The container is removed when t ends.
func startRedisContainer(t testing.TB) (*tcredis.RedisContainer, string) {
	t.Helper()
	dockerHealthy(t)
	image := os.Getenv(envRedisImage)
	if image == "" {
		image = "redis:7"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := tcredis.Run(ctx, image)
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		skipOrFail(t, "cannot start a Redis container from "+image+": "+err.Error())
	}
	url, err := c.ConnectionString(ctx)
	if err != nil {
		t.Fatalf("redis container url: %v", err)
	}
	return c, url
}

// dockerHealthy skips t (or fails it when Redis is required) unless a
// Docker engine answers, like testcontainers.SkipIfProviderIsNotHealthy.
func dockerHealthy(t testing.TB) {
	t.Helper()
	provider, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		skipOrFail(t, "no Docker engine for testcontainers-go: "+err.Error())
	}
	t.Cleanup(func() { _ = provider.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := provider.Health(ctx); err != nil {
		skipOrFail(t, "Docker engine is not healthy: "+err.Error())
	}
}

// newRedis returns a client on a real Redis for t: the one at
// LATCHKEY_TEST_REDIS_URL if set, else a testcontainers-go Redis. Without
// either, the test skips (or fails when LATCHKEY_REQUIRE_REDIS=1).
func newRedis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	url := os.Getenv(envRedisURL)
	if url == "" {
		_, url = startRedisContainer(t)
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		skipOrFail(t, "redis at "+url+" does not answer: "+err.Error())
	}
	return rdb, url
}

func TestRedisHelper(t *testing.T) {
	rdb, _ := newRedis(t)
	if err := rdb.Set(t.Context(), "k", "v", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
}
