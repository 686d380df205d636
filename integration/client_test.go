package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/client"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// doneGuard bounds the wait for a lease's Done that is due: it fails only a
// lease that is never reported ended.
const doneGuard = 15 * time.Second

// clientEnv is a server on a real Redis and a client of it.
type clientEnv struct {
	*testEnv
	c *client.Client
}

// fastRetry retries quickly, so tests of retries do not wait for the defaults.
var fastRetry = client.WithRetry(client.Retry{Attempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})

func newClientEnv(t *testing.T, opts ...envOption) *clientEnv {
	t.Helper()
	e := newTestEnv(t, opts...)
	return &clientEnv{testEnv: e, c: mustClient(t, e.URL, fastRetry)}
}

func mustClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitDone waits for l's Done and returns its Err.
func waitDone(t *testing.T, l *client.Lease, what string) error {
	t.Helper()
	select {
	case <-l.Done():
		return l.Err()
	case <-time.After(doneGuard):
		t.Fatalf("after %s: %s: Done still open", doneGuard, what)
		return nil
	}
}

func wantLost(t *testing.T, err error, reason string) {
	t.Helper()
	var lost *client.LostError
	if !errors.As(err, &lost) || !errors.Is(err, client.ErrLost) || lost.Reason != reason {
		t.Fatalf("Err = %v, want a *LostError with reason %s", err, reason)
	}
}

func wantFree(t *testing.T, c *client.Client, name string) {
	t.Helper()
	st, err := c.Status(t.Context(), name)
	if err != nil || st.Held {
		t.Fatalf("status of %s = %+v, %v; want free", name, st, err)
	}
}

// TestClientLockFenceUnlock: a lease carries a fence above every earlier
// one and a validity measured from when the request was sent; a second
// owner is refused with the holder's remaining time; renew moves the
// validity; unlock frees the lock and ends the lease.
func TestClientLockFenceUnlock(t *testing.T) {
	e := newClientEnv(t)
	ctx := t.Context()
	before := time.Now()
	l, err := e.c.Lock(ctx, "job", client.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if l.Name != "job" || l.Fence <= 0 || len(l.Token) < 22 {
		t.Fatalf("lease = %+v", l)
	}
	// Measured from the send time: no later than the granting answer's
	// arrival plus the TTL, and no earlier than the call plus the TTL.
	if vu := l.ValidUntil(); vu.After(time.Now().Add(5*time.Second)) || vu.Before(before.Add(4*time.Second)) {
		t.Fatalf("ValidUntil = %v, want between %v and now, plus the 5s TTL", vu, before)
	}
	st, err := l.Inspect(ctx)
	if err != nil || !st.Owned || st.Fence != l.Fence || st.HoldCount != 1 {
		t.Fatalf("inspect = %+v, %v; want owned, fence %d, one hold", st, err, l.Fence)
	}

	_, err = e.c.TryLock(ctx, "job", client.LockOptions{})
	var held *client.HeldError
	if !errors.As(err, &held) || !errors.Is(err, client.ErrHeld) || held.RetryAfter <= 0 {
		t.Fatalf("TryLock of a held lock: %v, want a *HeldError with RetryAfter", err)
	}

	old := l.ValidUntil()
	if err := l.Renew(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if !l.ValidUntil().After(old.Add(10 * time.Second)) {
		t.Fatalf("ValidUntil after renew for 20s = %v, was %v", l.ValidUntil(), old)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitDone(t, l, "unlocked lease"); !errors.Is(err, client.ErrReleased) {
		t.Fatalf("Err after Unlock = %v, want ErrReleased", err)
	}
	wantFree(t, e.c, "job")
	if err := l.Renew(ctx, 0); !errors.Is(err, client.ErrReleased) {
		t.Fatalf("Renew after Unlock = %v, want ErrReleased", err)
	}
	l2, err := e.c.TryLock(ctx, "job", client.LockOptions{})
	if err != nil || l2.Fence <= l.Fence {
		t.Fatalf("next lease = %+v, %v; want a fence above %d", l2, err, l.Fence)
	}
	_ = l2.Unlock(ctx)
}

// TestClientLockWaits: Lock waits for the holder's release and gets the
// lock then; a wait that ends first is a *HeldError.
func TestClientLockWaits(t *testing.T) {
	e := newClientEnv(t)
	ctx := t.Context()
	l1, err := e.c.Lock(ctx, "queue", client.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Lock(ctx, "queue", client.LockOptions{Wait: 100 * time.Millisecond}); !errors.Is(err, client.ErrHeld) {
		t.Fatalf("short wait on a held lock: %v, want ErrHeld", err)
	}
	got := make(chan error, 1)
	var l2 *client.Lease
	go func() {
		var err error
		l2, err = e.c.Lock(ctx, "queue", client.LockOptions{Wait: 30 * time.Second, Fair: false})
		got <- err
	}()
	e.waitForWaiters(t, "queue", 1)
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil || l2.Fence <= l1.Fence {
		t.Fatalf("waiter: %v; want the lock with a fence above %d", err, l1.Fence)
	}
	_ = l2.Unlock(ctx)
}

// TestClientErrors: the server's problems come back as typed errors.
func TestClientErrors(t *testing.T) {
	e := newClientEnv(t)
	ctx := t.Context()
	_, err := e.c.Lock(ctx, "bad{name}", client.LockOptions{})
	var inv *client.InvalidRequestError
	if !errors.As(err, &inv) || !errors.Is(err, client.ErrInvalidRequest) || inv.Field != "name" {
		t.Fatalf("bad name: %v (%+v), want an *InvalidRequestError for name", err, inv)
	}
	_, err = e.c.Lock(ctx, "ok", client.LockOptions{TTL: 100 * 24 * time.Hour})
	if !errors.As(err, &inv) || inv.Field != "ttl" {
		t.Fatalf("ttl past the bound: %v, want an *InvalidRequestError for ttl", err)
	}

	l, err := e.c.Lock(ctx, "gone", client.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.adminClient(t).ForceRelease(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx, 0); !errors.Is(err, client.ErrLeaseNotFound) {
		t.Fatalf("renew of a force-released lease: %v, want ErrLeaseNotFound", err)
	}
	wantLost(t, waitDone(t, l, "force-released lease"), client.ReasonForceReleased)

	l, err = e.c.Lock(ctx, "taken", client.LockOptions{TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wantLost(t, waitDone(t, l, "lease past its TTL"), client.ReasonValidityElapsed)
	eventually(t, doneGuard, "the lease expires on the server", func() bool { return !e.inspect(t, "taken").Held })
	other, err := e.c.Lock(ctx, "taken", client.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, client.ErrNotOwner) {
		t.Fatalf("unlock of a lease taken over: %v, want ErrNotOwner", err)
	}
	if st := e.inspect(t, "taken"); !st.Held || st.Fence != other.Fence {
		t.Fatalf("after the old holder's unlock: %+v, want still held by fence %d", st, other.Fence)
	}

	if err := e.c.ForceRelease(ctx, "taken"); !isStatus(err, http.StatusForbidden) {
		t.Fatalf("force-release without the admin key: %v, want 403", err)
	}
}

func isStatus(err error, status int) bool {
	var p *client.Problem
	return errors.As(err, &p) && p.Status == status
}

func (e *clientEnv) adminClient(t *testing.T) *client.Client {
	return mustClient(t, e.URL, client.WithAPIKey(testAdminKey))
}

// keptPast waits until l's ValidUntil has moved forward n times (each move
// is a renewal confirmed to the client) and the clock has passed until,
// failing if the lease ends first.
func keptPast(t *testing.T, l *client.Lease, n int, until time.Time) {
	t.Helper()
	last, moves := l.ValidUntil(), 0
	eventually(t, doneGuard, fmt.Sprintf("%d renewals move ValidUntil, and %v passes", n, until), func() bool {
		select {
		case <-l.Done():
			t.Fatalf("lease ended after %d renewals: %v", moves, l.Err())
		default:
		}
		if vu := l.ValidUntil(); vu.After(last) {
			last, moves = vu, moves+1
		}
		return moves >= n && time.Now().After(until)
	})
}

// TestClientKeepalive: the client's heartbeats keep a keep-alive lease
// past its first validity and its heartbeat (each confirmed renewal moves
// ValidUntil), and a force-release is reported as the server's reason.
func TestClientKeepalive(t *testing.T) {
	e := newClientEnv(t)
	ctx := t.Context()
	l, err := e.c.Lock(ctx, "ka", client.LockOptions{TTL: 3 * time.Second, KeepAlive: true,
		Heartbeat: 3 * time.Second, MaxHold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	first := l.ValidUntil()
	// The client renews twice per heartbeat: three renewals span more than
	// one heartbeat, and the lease lives on past its first ValidUntil.
	keptPast(t, l, 3, first)
	if st, err := l.Inspect(ctx); err != nil || !st.Owned || st.KeepAlive == nil {
		t.Fatalf("inspect = %+v, %v; want owned with keep-alive", st, err)
	}
	if err := e.adminClient(t).ForceRelease(ctx, "ka"); err != nil {
		t.Fatal(err)
	}
	wantLost(t, waitDone(t, l, "force-released keep-alive lease"), client.ReasonForceReleased)
}

// TestClientHold: a hold stays held past its first validity while its
// stream is open (each renewed event moves ValidUntil), ends with the
// server's reason on a force-release, and Unlock frees the lock before it
// returns.
func TestClientHold(t *testing.T) {
	e := newClientEnv(t)
	ctx := t.Context()
	h, err := e.c.Hold(ctx, "held", client.HoldOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	first := h.ValidUntil()
	// Renewed every TTL/3: the hold lives on past its first ValidUntil,
	// each renewed event moving it.
	keptPast(t, h, 4, first)
	if st, err := h.Inspect(ctx); err != nil || !st.Owned || st.Fence != h.Fence {
		t.Fatalf("inspect = %+v, %v", st, err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wantFree(t, e.c, "held")
	if err := waitDone(t, h, "unlocked hold"); !errors.Is(err, client.ErrReleased) {
		t.Fatalf("Err = %v, want ErrReleased", err)
	}

	h, err = e.c.Hold(ctx, "held", client.HoldOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.adminClient(t).ForceRelease(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	wantLost(t, waitDone(t, h, "force-released hold"), client.ReasonForceReleased)
}

// TestClientServerKilled: when the server dies, a hold reports its broken
// connection at once and a keep-alive lease ends at its ValidUntil: neither
// is silently kept.
func TestClientServerKilled(t *testing.T) {
	e := newClientEnv(t)
	ctx := t.Context()
	h, err := e.c.Hold(ctx, "crash-hold", client.HoldOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ka, err := e.c.Lock(ctx, "crash-ka", client.LockOptions{TTL: time.Second, KeepAlive: true, MaxHold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e.kill()
	wantLost(t, waitDone(t, h, "hold on a dead server"), client.ReasonConnectionLost)
	wantLost(t, waitDone(t, ka, "keep-alive lease on a dead server"), client.ReasonValidityElapsed)
	if !time.Now().After(ka.ValidUntil()) {
		t.Errorf("keep-alive lease ended before its ValidUntil")
	}
}

// TestClientRedisPausedPastLease: while Redis does not answer for longer
// than the TTL, a keep-alive lease and a hold are both reported lost.
func TestClientRedisPausedPastLease(t *testing.T) {
	singleNode(t)
	e := newClientEnv(t, withServiceConfig(func(sc *serviceConfig) { sc.OpTimeout = 200 * time.Millisecond }))
	ctx := t.Context()
	ka, err := e.c.Lock(ctx, "paused-ka", client.LockOptions{TTL: time.Second, KeepAlive: true,
		Heartbeat: 600 * time.Millisecond, MaxHold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.c.Hold(ctx, "paused-hold", client.HoldOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.RDB.Do(ctx, "CLIENT", "PAUSE", 4000, "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	// The pause must not outlast the test (a Redis shared by the tests would
	// stall the next one). Redis 7.0 holds back even CLIENT UNPAUSE while
	// paused ALL, so it is sent until it is answered: at once, or when the
	// pause ends.
	t.Cleanup(func() {
		uctx, cancel := context.WithTimeout(context.Background(), doneGuard)
		defer cancel()
		for {
			err := e.RDB.Do(uctx, "CLIENT", "UNPAUSE").Err()
			if err == nil {
				return
			}
			if uctx.Err() != nil {
				t.Errorf("CLIENT UNPAUSE: %v", err)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	for _, l := range []*client.Lease{ka, h} {
		err := waitDone(t, l, l.Name+" while Redis is paused")
		if !errors.Is(err, client.ErrLost) {
			t.Errorf("%s: Err = %v, want lost", l.Name, err)
		}
	}
}

// flakyAcquires is a proxy in front of the server that forwards every
// request, but answers some acquires with a 503 after the server granted
// them: the client cannot know they were.
type flakyAcquires struct {
	proxy     *httputil.ReverseProxy
	srv       *httptest.Server
	fail      atomic.Int64 // how many of the next acquires to answer 503 (-1: all)
	hang      atomic.Bool  // instead, answer nothing until the client gives up
	seen      atomic.Int64 // acquires forwarded
	failHolds atomic.Int64 // how many of the next holds to answer 503 after a grant
	holdGrant atomic.Int64 // the status of the last grant made for a failed hold
}

func (f *flakyAcquires) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/hold") && f.failHolds.Load() > 0 {
		// What a server whose store answer was lost leaves behind: the
		// script granted the lease (under the client's token, which the
		// server never gives back) and the client gets a 503. A plain
		// acquire with the same token and body makes that grant.
		f.failHolds.Add(-1)
		grant := r.Clone(context.WithoutCancel(r.Context()))
		grant.URL.Path, grant.URL.RawPath = strings.TrimSuffix(r.URL.Path, "/hold"), ""
		rec := httptest.NewRecorder()
		f.proxy.ServeHTTP(rec, grant)
		f.holdGrant.Store(int64(rec.Code))
		unavailable(w)
		return
	}
	if r.Method != http.MethodPost || strings.HasSuffix(r.URL.Path, "/renew") || strings.HasSuffix(r.URL.Path, "/hold") {
		f.proxy.ServeHTTP(w, r)
		return
	}
	f.seen.Add(1)
	rec := httptest.NewRecorder()
	f.proxy.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context())))
	if f.hang.Load() {
		<-r.Context().Done()
		return
	}
	if n := f.fail.Load(); n != 0 {
		f.fail.Add(-1)
		unavailable(w)
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// unavailable answers the server's 503 store-unavailable.
func unavailable(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"type":"store-unavailable","title":"Store unavailable","status":503}`))
}

func newFlakyProxy(t *testing.T, target string) (*flakyAcquires, string) {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	f := &flakyAcquires{proxy: httputil.NewSingleHostReverseProxy(u)}
	f.srv = httptest.NewServer(f)
	t.Cleanup(func() {
		f.srv.CloseClientConnections() // a hold's stream would keep Close waiting
		f.srv.Close()
	})
	return f, f.srv.URL
}

// TestClientAcquireUnknownOutcome: an acquire granted by the server but
// answered 503 (or not answered before the caller gives up) leaves no lease
// behind and no hold count off by one.
func TestClientAcquireUnknownOutcome(t *testing.T) {
	e := newClientEnv(t)
	ctx := t.Context()
	f, url := newFlakyProxy(t, e.URL)
	c := mustClient(t, url, fastRetry)

	// One 503: the retry with the same token is reentrant; the extra hold is
	// given back, so one Unlock frees the lock.
	f.fail.Store(1)
	l, err := c.Lock(ctx, "once", client.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if f.seen.Load() != 2 {
		t.Fatalf("acquires sent = %d, want 2 (one retry)", f.seen.Load())
	}
	if st, err := e.c.Status(ctx, "once"); err != nil || st.HoldCount != 1 || st.Fence != l.Fence {
		t.Fatalf("after a retried acquire: %+v, want one hold with fence %d", st, l.Fence)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wantFree(t, e.c, "once")

	// Two 503s: the third attempt re-enters with three holds, and both extra
	// holds are given back.
	f.fail.Store(2)
	l, err = c.Lock(ctx, "twice", client.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := e.c.Status(ctx, "twice"); err != nil || st.HoldCount != 1 || st.Fence != l.Fence {
		t.Fatalf("after two retries: %+v, want one hold with fence %d", st, l.Fence)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wantFree(t, e.c, "twice")

	// Every acquire answered 503: Lock gives up and releases what was granted.
	f.fail.Store(-1)
	if _, err := c.Lock(ctx, "always", client.LockOptions{TTL: time.Minute}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Lock through a proxy answering 503: %v, want ErrUnavailable", err)
	}
	wantFree(t, e.c, "always")
	f.fail.Store(0)

	// Granted, but no answer before the caller's deadline.
	f.hang.Store(true)
	tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := c.Lock(tctx, "timeout", client.LockOptions{TTL: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with no answer: %v, want the deadline", err)
	}
	if f.seen.Load() == 0 || e.inspect(t, "timeout").Fence == 0 {
		t.Fatal("the acquire never reached the server: the test proves nothing")
	}
	wantFree(t, e.c, "timeout")
}

// TestClientHoldUnknownOutcome: a hold granted by the server but answered
// 503 is sent again with the same token and re-enters; Hold gives back the
// earlier attempt's hold before it returns, so when the stream ends (the
// server releases one hold then) the lock is free at once, not at its TTL.
func TestClientHoldUnknownOutcome(t *testing.T) {
	e := newClientEnv(t)
	ctx := t.Context()
	f, url := newFlakyProxy(t, e.URL)
	c := mustClient(t, url, fastRetry)

	f.failHolds.Store(1)
	h, err := c.Hold(ctx, "hold-once", client.HoldOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if f.holdGrant.Load() != http.StatusCreated {
		t.Fatalf("the failed hold's grant answered %d, want 201: the test proves nothing", f.holdGrant.Load())
	}
	if st, err := e.c.Status(ctx, "hold-once"); err != nil || st.HoldCount != 1 || st.Fence != h.Fence {
		t.Errorf("after a retried hold: %+v, %v; want one hold with fence %d", st, err, h.Fence)
	}
	// The stream breaks without an Unlock: the server's release of the
	// stream's hold frees the lock.
	f.srv.CloseClientConnections()
	wantLost(t, waitDone(t, h, "hold whose connection broke"), client.ReasonConnectionLost)
	eventually(t, doneGuard, "the lock is freed when the hold's stream ends", func() bool {
		return !e.inspect(t, "hold-once").Held
	})
}

// TestClientConcurrentUse: one client shared by goroutines that take the
// same lock in turn: never two inside at once, fences strictly increasing
// in the order of entry (run with -race).
func TestClientConcurrentUse(t *testing.T) {
	e := newClientEnv(t)
	ctx := t.Context()
	var (
		inside atomic.Int32
		mu     sync.Mutex
		fences []int64
		wg     sync.WaitGroup
	)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				l, err := e.c.Lock(ctx, "shared", client.LockOptions{TTL: 10 * time.Second, Wait: 30 * time.Second})
				if err != nil {
					t.Errorf("worker %d: %v", i, err)
					return
				}
				if inside.Add(1) != 1 {
					t.Errorf("two holders at once")
				}
				mu.Lock()
				fences = append(fences, l.Fence)
				mu.Unlock()
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("worker %d: unlock: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	if len(fences) != 18 {
		t.Fatalf("%d grants, want 18", len(fences))
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences in order of entry %v: not strictly increasing", fences)
		}
	}
}

// TestClientLimiter: Check allows then denies with a retry-after; Wait
// sleeps until allowed, and gives up at once when that would pass the
// context's deadline.
func TestClientLimiter(t *testing.T) {
	e := newClientEnv(t, withPolicies(policy("one-per-second", ratelimit.FixedWindow, 1, time.Second)))
	ctx := t.Context()
	lim := e.c.Limiter()
	d, err := lim.Check(ctx, "one-per-second", "user-1", 1)
	if err != nil || !d.Allowed || d.Limit != 1 || d.Remaining != 0 {
		t.Fatalf("first check = %+v, %v; want allowed, 0 remaining", d, err)
	}
	d, err = lim.Check(ctx, "one-per-second", "user-1", 1)
	if err != nil || d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("second check = %+v, %v; want denied with a retry-after", d, err)
	}
	short, cancel := context.WithTimeout(ctx, time.Millisecond*50)
	defer cancel()
	if _, err := lim.Wait(short, "one-per-second", "user-1", 1); !errors.Is(err, client.ErrWouldExceedDeadline) {
		t.Fatalf("Wait with a deadline before the retry-after: %v, want ErrWouldExceedDeadline", err)
	}
	d, err = lim.Wait(ctx, "one-per-second", "user-1", 1)
	if err != nil || !d.Allowed {
		t.Fatalf("Wait = %+v, %v; want allowed", d, err)
	}
	var pnf *client.Problem
	if _, err := lim.Check(ctx, "no-such-policy", "k", 1); !errors.As(err, &pnf) || pnf.Type != "policy-not-found" {
		t.Fatalf("unknown policy: %v, want policy-not-found", err)
	}
}
