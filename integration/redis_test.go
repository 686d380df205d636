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
	// envRequireDocker "1": fail instead of skipping when Docker or the Latchkey
	// image (LATCHKEY_TEST_IMAGE, see image_test.go) cannot be had. It implies
	// LATCHKEY_REQUIRE_REDIS, as Docker is where the tests get Redis.
	envRequireDocker = "LATCHKEY_REQUIRE_DOCKER"
	// envRunID, when set, labels every container and network the tests create
	// with latchkey.test.run=<value>, so whoever ran them can find what a
	// crashed run left behind without touching anyone else's containers.
	envRunID = "LATCHKEY_TEST_RUN_ID"
)

func envTrue(name string) bool {
	b, _ := strconv.ParseBool(os.Getenv(name))
	return b
}

func required() bool { return envTrue(envRequireRedis) || envTrue(envRequireDocker) }

// skipOrFail skips the test with the reason, or fails it when the
// environment requires Redis and Docker (as CI does).
func skipOrFail(t testing.TB, reason string) {
	t.Helper()
	if required() {
		t.Fatalf("%s (and %s=1 or %s=1 requires it)", reason, envRequireRedis, envRequireDocker)
	}
	t.Skip(reason)
}

// runLabels are the labels of every container and network the tests create.
func runLabels() map[string]string {
	if id := os.Getenv(envRunID); id != "" {
		return map[string]string{"latchkey.test.run": id}
	}
	return nil
}

// startRedisContainer starts a fresh Redis container for t and returns it
// with its URL (on the host's published port). The container is removed when
// t ends. opts customise the container, e.g. to join a network.
func startRedisContainer(t testing.TB, opts ...testcontainers.ContainerCustomizer) (*tcredis.RedisContainer, string) {
	t.Helper()
	dockerHealthy(t)
	image := os.Getenv(envRedisImage)
	if image == "" {
		image = "redis:7"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts = append([]testcontainers.ContainerCustomizer{testcontainers.WithLabels(runLabels())}, opts...)
	c, err := tcredis.Run(ctx, image, opts...)
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
	rdb := newClient(t, url)
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

// newClient returns a go-redis client on url, closed when t ends.
func newClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
