package integration

import (
	"net/http"
	"testing"
	"time"
)

// TestWaitAfterSubscriberOutage stops Redis while a waiter subscribes to a
// lock's wake-ups, so its subscription cannot be sent, and starts it again
// after that waiter gave up. A later waiter on the same (free) lock is
// granted it at once: it does not wait for the confirmation of the
// subscription that was never sent.
func TestWaitAfterSubscriberOutage(t *testing.T) {
	// A waiter waits for its subscription for up to the Redis timeout: far
	// longer than the bound below, which only tells a wait for a lost
	// confirmation from none.
	const opTimeout = 20 * time.Second
	rr := newRestartableRedis(t, opTimeout)
	e := newTestEnv(t, withRedisClient(rr.Client, rr.URL), withOpTimeout(opTimeout))

	rr.Stop(t)
	r := e.doWithin(t, 10*time.Second, "POST", "/v1/locks/after-outage", `{"wait":"500ms"}`)
	wantProblem(t, r, http.StatusServiceUnavailable, "store-unavailable")
	if ch, ls := e.Svc.Subscriptions(); ch != 0 || ls != 0 {
		t.Errorf("after the waiter gave up: %d channels, %d listeners; want none", ch, ls)
	}

	rr.Start(t)
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
