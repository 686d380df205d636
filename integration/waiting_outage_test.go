package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"

	"github.com/latchkey/latchkey/service/locks"
)

// pauseContainer freezes every process of c (docker pause: SIGSTOP for the
// whole container) and returns the function that thaws it, which is also
// called when t ends. Unlike CLIENT PAUSE, connections and new dials are
// still accepted by the kernel: Redis simply stops answering.
func pauseContainer(t *testing.T, c testcontainers.Container) (unpause func()) {
	t.Helper()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		t.Fatalf("docker provider: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	id := c.GetContainerID()
	if _, err := p.Client().ContainerPause(t.Context(), id, client.ContainerPauseOptions{}); err != nil {
		t.Fatalf("docker pause: %v", err)
	}
	unpause = sync.OnceFunc(func() {
		if _, err := p.Client().ContainerUnpause(context.Background(), id, client.ContainerUnpauseOptions{}); err != nil {
			t.Errorf("docker unpause: %v", err)
		}
	})
	t.Cleanup(unpause)
	return unpause
}

// latencies logs the distribution of ds against bound.
func logLatencies(t *testing.T, what string, ds []time.Duration, bound time.Duration) {
	t.Helper()
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	over := len(ds) - func() int { i, _ := slices.BinarySearch(ds, bound); return i }()
	t.Logf("%s: %d answers, min %s p50 %s p90 %s p99 %s max %s; %d past wait + Redis timeout (%s)",
		what, len(ds), ds[0].Round(time.Millisecond), q(0.5).Round(time.Millisecond), q(0.9).Round(time.Millisecond),
		q(0.99).Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), over, bound)
}

// TestWaitersAnswerWhileRedisPaused: with Redis frozen (docker pause), 200
// concurrent waiting acquires, half on one lock and half on locks of their
// own (each a SUBSCRIBE of its own), fair or not, all answer 503
// store-unavailable while Redis is still frozen: none waits for Redis to
// come back. Redis freezes either before the requests arrive (their
// subscriptions and first attempts hang) or while they wait, registered and
// subscribed (their last attempts and their leaving the waiters hang). The
// latencies are logged; the only bound checked is a hang guard, the
// evidence is that every answer came before the thaw. After it, the
// service recovers: a release wakes a new waiter through pub/sub.
func TestWaitersAnswerWhileRedisPaused(t *testing.T) {
	const (
		n         = 200
		opTimeout = 500 * time.Millisecond
		thawCap   = time.Minute // the freeze lasts until every answer is in, or this
	)
	for _, fair := range []bool{false, true} {
		for _, during := range []string{"before", "waiting"} {
			t.Run(fmt.Sprintf("fair=%v/freeze=%s", fair, during), func(t *testing.T) {
				rc, url := startRedisContainer(t)
				e := newTestEnv(t, withRedis(url), withServerClient(opTimeout), withClient(serverClients[1].wrap))
				wait := time.Second
				if during == "waiting" {
					// Room to see every waiter registered, and Redis frozen,
					// before any wait ends, however loaded the machine.
					wait = 20 * time.Second
				}
				body := fmt.Sprintf(`{"wait":%q,"fair":%v}`, wait, fair)
				holdBody := fmt.Sprintf(`{"ttl":"10m","fair":%v}`, fair)
				shared := e.acquire(t, "shared", holdBody)
				names := make([]string, n)
				for i := range names {
					names[i] = "shared"
					if i%2 == 1 {
						names[i] = fmt.Sprintf("own-%d", i)
						e.acquire(t, names[i], holdBody)
					}
				}

				var unpause func()
				var thawed atomic.Bool
				if during == "before" {
					unpause = pauseContainer(t, rc)
				}
				type answer struct {
					r          response
					took       time.Duration
					afterThawn bool
				}
				answers := make(chan answer, n)
				for _, name := range names {
					go func() {
						start := time.Now()
						r := e.send(t.Context(), "POST", "/v1/locks/"+name, body)
						answers <- answer{r, time.Since(start), thawed.Load()}
					}()
				}
				if during == "waiting" {
					eventually(t, 30*time.Second, "every waiter registered", func() bool {
						_, listeners := e.Svc.Subscriptions()
						return listeners == n && e.registeredWaiters(t, names) == n
					})
					unpause = pauseContainer(t, rc)
				}
				frozen := time.Now()

				var took []time.Duration
				thaw := time.After(thawCap)
				for len(took) < n {
					select {
					case a := <-answers:
						took = append(took, a.took)
						if a.r.Err != nil || a.r.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.r.Body), "store-unavailable") {
							t.Errorf("answer with Redis frozen: %d %s %v; want 503 store-unavailable", a.r.Status, a.r.Body, a.r.Err)
						}
						if a.afterThawn {
							t.Errorf("an answer came only after Redis was thawed")
						}
					case <-thaw:
						thawed.Store(true)
						unpause()
						t.Errorf("%d of %d waiters had not answered %s into the freeze", n-len(took), n, thawCap)
						thaw = nil
					}
				}
				frozenFor := time.Since(frozen)
				if ch, l := e.Svc.Subscriptions(); l != 0 || ch != 0 {
					t.Errorf("after every answer: %d channels, %d listeners; want none", ch, l)
				}
				thawed.Store(true)
				unpause()
				logLatencies(t, "waiting acquires with Redis frozen", took, wait+opTimeout)
				t.Logf("Redis was frozen for %s", frozenFor.Round(time.Millisecond))
				if hang := wait + opTimeout + 30*time.Second; took[len(took)-1] > hang {
					t.Errorf("slowest answer took %s: it hangs", took[len(took)-1])
				}

				// Back to normal: a release wakes a new waiter at once
				// (the holder's TTL is ten minutes, the wait half a
				// minute: a 201 means it was woken).
				eventually(t, 30*time.Second, "Redis answers again", func() bool {
					return e.send(t.Context(), "GET", "/v1/locks/shared", "").Status == http.StatusOK
				})
				woken := make(chan response, 1)
				go func() {
					woken <- e.send(t.Context(), "POST", "/v1/locks/shared", fmt.Sprintf(`{"wait":"30s","fair":%v}`, fair))
				}()
				eventually(t, 30*time.Second, "the new waiter registered", func() bool { return e.registeredWaiters(t, []string{"shared"}) == 1 })
				e.release(t, "shared", shared.Token)
				if r := <-woken; r.Status != http.StatusCreated {
					t.Errorf("waiter after the outage, on release: %d %s %v; want 201", r.Status, r.Body, r.Err)
				}
			})
		}
	}
}

// registeredWaiters counts the waiters registered in Redis on the distinct
// locks among names.
func (e *testEnv) registeredWaiters(t testing.TB, names []string) int64 {
	t.Helper()
	var total int64
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		n, err := e.RDB.ZCard(t.Context(), e.lockKeys(name).Waiters).Result()
		if err != nil {
			t.Fatalf("ZCARD waiters of %s: %v", name, err)
		}
		total += n
	}
	return total
}

// TestLostReasonAfterRedisPause: a keep-alive lease whose renewals could not
// run while Redis was frozen expired meanwhile. Right after the thaw, before
// any renewer has visited it, its owner's GET says lost_reason expired, and
// still does once a renewer has.
func TestLostReasonAfterRedisPause(t *testing.T) {
	rc, url := startRedisContainer(t)
	in := newTestEnv(t, withRedis(url), withRenewer(instancePoll))
	tok := in.acquireKeepalive(t, "ka-frozen", `{"ttl":"1s","keepalive":true}`)
	if st := in.inspectAs(t, "ka-frozen", tok); !st.ownedIs(true) {
		t.Fatalf("before the freeze: %v, want owned", st)
	}
	// Nothing renews from here on (every instance stalled with Redis, or
	// came back later than it): only the registry remembers the lease.
	in.stopRenewer()
	unpause := pauseContainer(t, rc)
	time.Sleep(1500 * time.Millisecond) // past the lease's TTL, on Redis's clock too
	unpause()

	st := in.inspectAs(t, "ka-frozen", tok)
	if !st.ownedIs(false) || st.Held || st.LostReason != locks.LostExpired {
		t.Errorf("after the freeze, before any renewal: %v; want held and owned false, lost_reason %q", st, locks.LostExpired)
	}
	if n := in.registrySize(t); n != 1 {
		t.Fatalf("registry = %d entries, want the lease still there (no renewer visited it)", n)
	}

	startRenewer(t, in.Svc)
	eventually(t, 30*time.Second, "a renewer visited the lease", func() bool { return in.registrySize(t) == 0 })
	if st := in.inspectAs(t, "ka-frozen", tok); st.LostReason != locks.LostExpired {
		t.Errorf("after a renewer visited it: %v, want lost_reason %q", st, locks.LostExpired)
	}
	// Another token learns nothing about it.
	if st := in.inspectAs(t, "ka-frozen", locks.NewToken()); st.LostReason != "" {
		t.Errorf("another token: %v, want no lost_reason", st)
	}
}
