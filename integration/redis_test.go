package integration

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// Environment that tells the tests where Redis is and whether it is required.
const (
	envRedisURL     = "LATCHKEY_TEST_REDIS_URL"   // use this Redis instead of a container
	envRedisImage   = "LATCHKEY_TEST_REDIS_IMAGE" // image for testcontainers (default redis:7), never pulled
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
	skips.add(reason)
	t.Skip(reason)
}

// runLabels are the labels of every container and network the tests create.
func runLabels() map[string]string {
	if id := os.Getenv(envRunID); id != "" {
		return map[string]string{"latchkey.test.run": id}
	}
	return nil
}

// defaultRedisImage is the Redis image when LATCHKEY_TEST_REDIS_IMAGE is not set.
const defaultRedisImage = "redis:7"

// startRedisContainer starts a fresh Redis container for t and returns it
// with its URL (on the host's published port, bound to 127.0.0.1). The
// container is removed when t ends. opts customise the container, e.g. to
// join a network.
func startRedisContainer(t testing.TB, opts ...testcontainers.ContainerCustomizer) (*tcredis.RedisContainer, string) {
	t.Helper()
	singleNode(t)
	dockerHealthy(t)
	image := cmp.Or(os.Getenv(envRedisImage), defaultRedisImage)
	if err := localImage(image); err != nil {
		skipOrFail(t, fmt.Sprintf("Redis image %s is not on the Docker engine and the tests never pull one (%v): "+
			"docker pull %s, or build one with .ci/redis-image.sh latchkey-ci/redis:7 and set %s=latchkey-ci/redis:7",
			image, err, image, envRedisImage))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts = append([]testcontainers.ContainerCustomizer{
		testcontainers.WithLabels(runLabels()),
		loopbackPorts("6379/tcp"),
	}, opts...)
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

// imageChecks maps an image name to a sync.OnceValue that inspects it.
var imageChecks sync.Map

// localImage returns nil if image is on the Docker engine, else the
// engine's error (such as "No such image"). The engine is asked once per
// image: a missing image is not pulled, where no registry answers that would
// only wait for the pull's deadline in every test.
func localImage(image string) error {
	check, _ := imageChecks.LoadOrStore(image, sync.OnceValue(func() error { return inspectImage(image) }))
	return check.(func() error)()
}

func inspectImage(image string) error {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = p.Client().ImageInspect(ctx, image)
	return err
}

// loopbackPorts exposes ports ("6379/tcp") and publishes each on a random
// port of 127.0.0.1 only: testcontainers-go publishes on every address of
// the host, which would open a test's Redis or Latchkey to the network.
func loopbackPorts(ports ...string) testcontainers.CustomizeRequestOption {
	return func(req *testcontainers.GenericContainerRequest) error {
		bindings := network.PortMap{}
		for _, p := range ports {
			port, err := network.ParsePort(p)
			if err != nil {
				return fmt.Errorf("port %q: %w", p, err)
			}
			bindings[port] = []network.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: "0"}}
		}
		req.ExposedPorts = append(req.ExposedPorts, ports...)
		return testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = bindings
		})(req)
	}
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

// newRedis returns a client on a real Redis for t: in the cluster pass the
// package's cluster (harness_cluster_test.go); else the one at
// LATCHKEY_TEST_REDIS_URL if set, else a testcontainers-go Redis. Without
// any, the test skips (or fails when LATCHKEY_REQUIRE_REDIS=1).
func newRedis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	url := os.Getenv(envRedisURL)
	switch {
	case onCluster():
		url = clusterURL(t)
	case url == "":
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

// TestContainersPublishOnLoopback: a test's Redis container publishes its
// port on 127.0.0.1 only.
func TestContainersPublishOnLoopback(t *testing.T) {
	c, _ := startRedisContainer(t)
	wantLoopbackPorts(t, c)
}

// wantLoopbackPorts fails t unless every port c publishes is bound to
// 127.0.0.1, and there is at least one.
func wantLoopbackPorts(t testing.TB, c testcontainers.Container) {
	t.Helper()
	info, err := c.Inspect(t.Context())
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	n := 0
	for port, bindings := range info.NetworkSettings.Ports {
		for _, b := range bindings {
			n++
			if b.HostIP.String() != "127.0.0.1" {
				t.Errorf("port %s published on %s:%s, want 127.0.0.1 only", port, b.HostIP, b.HostPort)
			}
		}
	}
	if n == 0 {
		t.Errorf("no published port: %v", info.NetworkSettings.Ports)
	}
}

// newClient returns a go-redis client on url, closed when t ends: a
// cluster client in the cluster pass.
func newClient(t testing.TB, url string) redis.UniversalClient {
	t.Helper()
	if onCluster() {
		return newClusterClient(t, url)
	}
	return newNodeClient(t, url)
}

// newNodeClient returns a client on the single Redis node at url, closed
// when t ends.
func newNodeClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
