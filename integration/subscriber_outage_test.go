package integration

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestWaitAfterSubscriberOutage stops Redis while a waiter subscribes to a
// lock's wake-ups, so its subscription cannot be sent, and starts it again
// after that waiter gave up. A later waiter on the same (free) lock is
// granted it at once: it does not wait for the confirmation of the
// subscription that was never sent.
func TestWaitAfterSubscriberOutage(t *testing.T) {
	rc, url := startRedisContainer(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	// The published port may change when the container restarts: every new
	// connection dials wherever the container is published now.
	var addr atomic.Value
	addr.Store(opts.Addr)
	opts.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr.Load().(string))
	}
	// A waiter waits for its subscription for up to the Redis timeout: far
	// longer than the bound below, which only tells a wait for a lost
	// confirmation from none.
	const opTimeout = 20 * time.Second
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = opTimeout, opTimeout, opTimeout, opTimeout
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	opts.DialerRetries, opts.DialerRetryTimeout = 2, 50*time.Millisecond
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	e := newTestEnvOn(t, rdb, url, withOpTimeout(opTimeout))
	t.Cleanup(func() { _ = e.Svc.Close() })

	stopTimeout := 10 * time.Second
	if err := rc.Stop(t.Context(), &stopTimeout); err != nil {
		t.Fatalf("stop redis: %v", err)
	}
	r := e.doWithin(t, 10*time.Second, "POST", "/v1/locks/after-outage", `{"wait":"500ms"}`)
	wantProblem(t, r, http.StatusServiceUnavailable, "store-unavailable")
	if ch, ls := e.Svc.Subscriptions(); ch != 0 || ls != 0 {
		t.Errorf("after the waiter gave up: %d channels, %d listeners; want none", ch, ls)
	}

	if err := rc.Start(t.Context()); err != nil {
		t.Fatalf("start redis again: %v", err)
	}
	port, err := rc.MappedPort(t.Context(), "6379/tcp")
	if err != nil {
		t.Fatalf("redis port after restart: %v", err)
	}
	host, _, _ := net.SplitHostPort(opts.Addr)
	addr.Store(net.JoinHostPort(host, port.Port()))
	waitForPing(t, addr.Load().(string))
	if err := e.Svc.LoadScripts(t.Context()); err != nil {
		t.Fatalf("load scripts after restart: %v", err)
	}

	for i := range 2 {
		start := time.Now()
		r := e.doWithin(t, 2*opTimeout, "POST", "/v1/locks/after-outage", `{"wait":"30s"}`)
		took := time.Since(start)
		wantStatus(t, r, http.StatusCreated)
		if took > opTimeout/2 {
			t.Errorf("waiting acquire %d of a free lock took %s: it waited for a subscription confirmation (Redis timeout %s)",
				i+1, took, opTimeout)
		}
		wantStatus(t, e.do(t, "DELETE", "/v1/locks/after-outage", "", "Lock-Token", r.Header.Get("Lock-Token")), http.StatusOK)
	}
}
