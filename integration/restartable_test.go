package integration

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// restartableRedis is a Redis container that a test stops and starts again,
// with a client that follows it to the port it is published on after the
// restart.
type restartableRedis struct {
	Container *tcredis.RedisContainer
	URL       string
	// Client is configured as cmd/server configures its own (openStore),
	// every bound set to the given timeout.
	Client *redis.Client
	addr   atomic.Value // where new connections dial
}

// newRestartableRedis starts the container and its client, both gone when t
// ends.
func newRestartableRedis(t *testing.T, opTimeout time.Duration) *restartableRedis {
	t.Helper()
	rc, url := startRedisContainer(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	r := &restartableRedis{Container: rc, URL: url}
	r.addr.Store(opts.Addr)
	opts.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, r.addr.Load().(string))
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = opTimeout, opTimeout, opTimeout, opTimeout
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	opts.DialerRetries, opts.DialerRetryTimeout = 2, 50*time.Millisecond
	r.Client = redis.NewClient(opts)
	t.Cleanup(func() { _ = r.Client.Close() })
	return r
}

// Stop stops the container.
func (r *restartableRedis) Stop(t *testing.T) {
	t.Helper()
	stopTimeout := 10 * time.Second
	if err := r.Container.Stop(t.Context(), &stopTimeout); err != nil {
		t.Fatalf("stop redis: %v", err)
	}
}

// Start starts the container again, points new connections at the port it
// is published on now, and waits until it answers PING.
func (r *restartableRedis) Start(t *testing.T) {
	t.Helper()
	if err := r.Container.Start(t.Context()); err != nil {
		t.Fatalf("start redis again: %v", err)
	}
	port, err := r.Container.MappedPort(t.Context(), "6379/tcp")
	if err != nil {
		t.Fatalf("redis port after restart: %v", err)
	}
	before := r.addr.Load().(string)
	host, _, _ := net.SplitHostPort(before)
	r.addr.Store(net.JoinHostPort(host, port.Port()))
	t.Logf("redis published at %s before the restart, %s after", before, r.addr.Load())
	waitForPing(t, r.addr.Load().(string))
}
