package locks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

// semReq is a semaphore request for count of permits.
func semReq(permits, count int64, ttl time.Duration) locks.SemaphoreRequest {
	return locks.SemaphoreRequest{Permits: permits, Count: count, AcquireRequest: locks.AcquireRequest{TTL: ttl}}
}

func mustSem(t *testing.T, svc *locks.Service, name string, req locks.SemaphoreRequest) locks.SemaphoreLease {
	t.Helper()
	l, err := svc.AcquireSemaphore(t.Context(), name, req)
	if err != nil {
		t.Fatalf("AcquireSemaphore(%q, %d of %d) = %v", name, req.Count, req.Permits, err)
	}
	return l
}

func mustSemState(t *testing.T, svc *locks.Service, name, token string) locks.SemaphoreState {
	t.Helper()
	st, err := svc.InspectSemaphore(t.Context(), name, token)
	if err != nil {
		t.Fatalf("InspectSemaphore(%q) = %v", name, err)
	}
	return st
}

func TestSemaphoreGrantsUpToItsPermits(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	a := mustSem(t, svc, "pool", semReq(8, 5, 10*time.Second))
	if a.Fence < t0.UnixMicro() || a.Count != 5 || a.Permits != 8 || a.Available != 3 || a.TTL != 10*time.Second ||
		!a.ExpiresAt.Equal(t0.Add(10*time.Second)) || len(a.Token) != 22 {
		t.Fatalf("first lease = %+v, want 5 of 8 permits (3 left), a 22-character token, a fence from TIME", a)
	}
	b := mustSem(t, svc, "pool", semReq(8, 3, 10*time.Second))
	if b.Fence <= a.Fence || b.Available != 0 || b.Token == a.Token {
		t.Fatalf("second lease = %+v, want its own token, a fence above %d, 0 left", b, a.Fence)
	}
	_, err := svc.AcquireSemaphore(t.Context(), "pool", semReq(8, 1, time.Second))
	var un *locks.PermitsUnavailableError
	if !errors.As(err, &un) || !errors.Is(err, store.ErrConflict) || un.Available != 0 || un.RetryAfter != 10*time.Second {
		t.Fatalf("a ninth permit: %v, want a PermitsUnavailableError with 0 free, retry after 10s", err)
	}
	got := mustSemState(t, svc, "pool", "")
	if n := len(got.Leases); n != 2 || got.Leases[0].Count+got.Leases[1].Count != 8 || got.LeasesTruncated {
		t.Errorf("leases = %+v (truncated %v), want the two leases of 5 and 3 permits", got.Leases, got.LeasesTruncated)
	}
	got.Leases = nil
	want := locks.SemaphoreState{Name: "pool", Permits: 8, InUse: 8, Holders: 2, Fence: b.Fence, At: t0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("state mismatch (-want +got):\n%s", diff)
	}
	if n, err := svc.ReleaseSemaphore(t.Context(), "pool", a.Token); err != nil || n != 5 {
		t.Fatalf("release = %d, %v; want 5 permits back", n, err)
	}
	if _, err := svc.ReleaseSemaphore(t.Context(), "pool", a.Token); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second release = %v, want ErrNotFound", err)
	}
	c := mustSem(t, svc, "pool", semReq(8, 5, time.Second))
	if c.Fence <= b.Fence {
		t.Errorf("fence after a release = %d, want above %d", c.Fence, b.Fence)
	}
}

func TestSemaphorePermitsMismatchAndAdminChange(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	a := mustSem(t, svc, "pool", semReq(2, 2, time.Minute))
	_, err := svc.AcquireSemaphore(t.Context(), "pool", semReq(3, 1, time.Minute))
	var pm *locks.PermitsMismatchError
	if !errors.As(err, &pm) || pm.Permits != 2 || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("acquire naming 3 permits of a 2-permit semaphore: %v, want PermitsMismatchError{2}", err)
	}
	st, err := svc.SetSemaphorePermits(t.Context(), "pool", 3)
	if err != nil || st.Permits != 3 || st.InUse != 2 || st.Available() != 1 {
		t.Fatalf("SetSemaphorePermits(3) = %+v, %v; want 3 permits, 2 in use, 1 free", st, err)
	}
	mustSem(t, svc, "pool", semReq(3, 1, time.Minute))
	// Lowered below what is in use: the leases keep their permits, nothing more is granted.
	if st, err := svc.SetSemaphorePermits(t.Context(), "pool", 1); err != nil || st.InUse != 3 || st.Available() != 0 {
		t.Fatalf("SetSemaphorePermits(1) = %+v, %v; want 3 in use, 0 free", st, err)
	}
	if _, err := svc.ReleaseSemaphore(t.Context(), "pool", a.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.AcquireSemaphore(t.Context(), "pool", semReq(1, 1, time.Minute)); !errors.As(err, new(*locks.PermitsUnavailableError)) {
		t.Fatalf("acquire with 1 of 1 in use = %v, want PermitsUnavailableError", err)
	}
}

func TestSemaphoreExpiredLeaseReturnsItsPermits(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	now := t0
	a := mustSem(t, svc, "pool", semReq(3, 2, time.Second))
	mustSem(t, svc, "pool", semReq(3, 1, 5*time.Second))
	advance(m, &now, time.Second)
	if st := mustSemState(t, svc, "pool", a.Token); st.InUse != 1 || st.Holders != 1 || st.Owned {
		t.Fatalf("state once the 2-permit lease expired = %+v, want 1 in use by 1 holder, not owned", st)
	}
	b := mustSem(t, svc, "pool", semReq(3, 2, time.Second))
	if b.Available != 0 {
		t.Errorf("lease after the expiry: available = %d, want 0", b.Available)
	}
	if _, err := svc.RenewSemaphore(t.Context(), "pool", a.Token, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("renew of the expired lease = %v, want ErrNotFound", err)
	}
	if _, err := svc.ReleaseSemaphore(t.Context(), "pool", a.Token); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("release of the expired lease = %v, want ErrNotFound", err)
	}
}

func TestSemaphoreRenew(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	now := t0
	a := mustSem(t, svc, "pool", semReq(2, 1, 2*time.Second))
	advance(m, &now, time.Second)
	l, err := svc.RenewSemaphore(t.Context(), "pool", a.Token, 0)
	if err != nil || l.TTL != 2*time.Second || !l.ExpiresAt.Equal(now.Add(2*time.Second)) || l.Fence != a.Fence || l.Count != 1 {
		t.Fatalf("renew = %+v, %v; want the lease's own 2s from now, same fence and count", l, err)
	}
	advance(m, &now, 1500*time.Millisecond)
	if st := mustSemState(t, svc, "pool", a.Token); !st.Owned || st.Lease.TTL != 500*time.Millisecond {
		t.Fatalf("state after the renewal = %+v, want owned with 500ms left", st)
	}
	if l, err = svc.RenewSemaphore(t.Context(), "pool", a.Token, 10*time.Second); err != nil || l.TTL != 10*time.Second {
		t.Fatalf("renew for 10s = %+v, %v", l, err)
	}
	advance(m, &now, 5*time.Second)
	if l, err = svc.RenewSemaphore(t.Context(), "pool", a.Token, 0); err != nil || l.TTL != 10*time.Second {
		t.Fatalf("renew for its own ttl after a change = %+v, %v; want the new 10s", l, err)
	}
}

func TestSemaphoreTokenIsNotReentrant(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	req := semReq(4, 1, time.Minute)
	req.Token = tokenA
	mustSem(t, svc, "pool", req)
	if _, err := svc.AcquireSemaphore(t.Context(), "pool", req); !errors.Is(err, locks.ErrTokenInUse) {
		t.Fatalf("second acquire with the same token = %v, want ErrTokenInUse", err)
	}
	if st := mustSemState(t, svc, "pool", ""); st.InUse != 1 {
		t.Errorf("in use = %d after a refused second acquire, want 1", st.InUse)
	}
}

func TestSemaphoreForceRelease(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	a := mustSem(t, svc, "pool", semReq(4, 1, time.Minute))
	b := mustSem(t, svc, "pool", semReq(4, 3, time.Minute))
	n, err := svc.ForceReleaseSemaphore(t.Context(), "pool")
	if err != nil || n != 2 {
		t.Fatalf("force release = %d, %v; want 2 leases removed", n, err)
	}
	st := mustSemState(t, svc, "pool", a.Token)
	if st.InUse != 0 || st.Holders != 0 || st.Fence <= b.Fence || st.LostReason != locks.LostForceReleased || st.Permits != 4 {
		t.Fatalf("state after force release = %+v, want none in use, a fence above %d, lost force_released, 4 permits kept", st, b.Fence)
	}
	if n, err := svc.ForceReleaseSemaphore(t.Context(), "pool"); err != nil || n != 0 {
		t.Errorf("force release of a free semaphore = %d, %v; want 0", n, err)
	}
	c := mustSem(t, svc, "pool", semReq(4, 4, time.Minute))
	if c.Fence <= st.Fence {
		t.Errorf("fence after force release = %d, want above the bump %d", c.Fence, st.Fence)
	}
}

func TestSemaphoreFenceAboveACounterAheadOfTheClock(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	a := mustSem(t, svc, "pool", semReq(2, 1, time.Minute))
	m.SetTime(t0.Add(-time.Hour)) // the clock steps back
	b := mustSem(t, svc, "pool", semReq(2, 1, time.Minute))
	if b.Fence != a.Fence+1 {
		t.Errorf("fence after the clock stepped back = %d, want %d", b.Fence, a.Fence+1)
	}
}

func TestSemaphoreFairQueueHoldsBackSmallRequests(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	t.Cleanup(func() { _ = svc.Close() })
	fair := func(count int64) locks.SemaphoreRequest {
		r := semReq(4, count, time.Minute)
		r.Fair = true
		return r
	}
	holder := mustSem(t, svc, "pool", fair(3))
	// A waiter for 4 permits queues first; a request for the 1 free permit
	// must not overtake it.
	big := make(chan error, 1)
	go func() {
		r := fair(4)
		r.Wait = 10 * time.Second
		_, err := svc.AcquireSemaphore(t.Context(), "pool", r)
		big <- err
	}()
	waitForSemWaiters(t, svc, "pool", 1)
	_, err := svc.AcquireSemaphore(t.Context(), "pool", fair(1))
	if !errors.As(err, new(*locks.PermitsUnavailableError)) {
		t.Fatalf("1 permit while a 4-permit waiter is first = %v, want PermitsUnavailableError", err)
	}
	plain := semReq(4, 1, time.Minute)
	if _, err := svc.AcquireSemaphore(t.Context(), "pool", plain); !errors.As(err, new(*locks.ModeError)) {
		t.Fatalf("plain acquire of a fair semaphore = %v, want ModeError", err)
	}
	if _, err := svc.ReleaseSemaphore(t.Context(), "pool", holder.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-big; err != nil {
		t.Fatalf("the 4-permit waiter after the release: %v, want granted", err)
	}
}

func TestSemaphoreWaiterGetsFreedPermits(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	t.Cleanup(func() { _ = svc.Close() })
	a := mustSem(t, svc, "pool", semReq(2, 2, time.Minute))
	got := make(chan error, 2)
	for range 2 {
		go func() {
			r := semReq(2, 1, time.Minute)
			r.Wait = 10 * time.Second
			_, err := svc.AcquireSemaphore(t.Context(), "pool", r)
			got <- err
		}()
	}
	waitForSemWaiters(t, svc, "pool", 2)
	if _, err := svc.ReleaseSemaphore(t.Context(), "pool", a.Token); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-got; err != nil {
			t.Fatalf("waiter after 2 permits were freed: %v, want granted", err)
		}
	}
	if st := mustSemState(t, svc, "pool", ""); st.InUse != 2 || st.Waiters != 0 {
		t.Errorf("state = %+v, want 2 in use and no waiters", st)
	}
}

func TestSemaphoreWaitTimesOutAndLeaves(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	t.Cleanup(func() { _ = svc.Close() })
	mustSem(t, svc, "pool", semReq(1, 1, time.Minute))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		r := semReq(1, 1, time.Minute)
		r.Wait = 30 * time.Second
		r.Fair = false
		_, err := svc.AcquireSemaphore(ctx, "pool", r)
		done <- err
	}()
	waitForSemWaiters(t, svc, "pool", 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, want context.Canceled", err)
	}
	waitForSemWaiters(t, svc, "pool", 0)
}

func TestSemaphoreValidation(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{MaxWait: time.Second})
	tests := []struct {
		name  string
		req   locks.SemaphoreRequest
		field string
	}{
		{"no permits", semReq(0, 1, 0), "permits"},
		{"negative permits", semReq(-1, 1, 0), "permits"},
		{"too many permits", semReq(locks.MaxPermits+1, 1, 0), "permits"},
		{"count above permits", semReq(2, 3, 0), "count"},
		{"negative count", semReq(2, -1, 0), "count"},
		{"ttl too short", semReq(2, 1, time.Microsecond), "ttl"},
		{"wait too long", locks.SemaphoreRequest{Permits: 2, AcquireRequest: locks.AcquireRequest{Wait: time.Minute}}, "wait"},
		{"bad token", locks.SemaphoreRequest{Permits: 2, AcquireRequest: locks.AcquireRequest{Token: "short"}}, "Lock-Token"},
		{"max_hold without keepalive", locks.SemaphoreRequest{Permits: 2, AcquireRequest: locks.AcquireRequest{MaxHold: time.Hour}}, "max_hold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := svc.AcquireSemaphore(t.Context(), "pool", tt.req)
			var ve *store.ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.field {
				t.Fatalf("AcquireSemaphore = %v, want a validation error naming %q", err, tt.field)
			}
		})
	}
	if _, err := svc.AcquireSemaphore(t.Context(), "bad{name}", semReq(2, 1, 0)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("bad name = %v, want ErrInvalid", err)
	}
	if _, err := svc.SetSemaphorePermits(t.Context(), "pool", 0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("SetSemaphorePermits(0) = %v, want ErrInvalid", err)
	}
}

func TestSemaphoreCapacityRecordOutlivesItsLeasesForTheRetention(t *testing.T) {
	svc, m := newTestService(t, locks.Config{FenceTTL: 2 * time.Hour, MaxHoldCap: time.Hour})
	now := t0
	a := mustSem(t, svc, "pool", semReq(3, 1, time.Minute))
	if _, err := svc.ReleaseSemaphore(t.Context(), "pool", a.Token); err != nil {
		t.Fatal(err)
	}
	advance(m, &now, time.Hour)
	if _, err := svc.AcquireSemaphore(t.Context(), "pool", semReq(5, 1, time.Minute)); !errors.As(err, new(*locks.PermitsMismatchError)) {
		t.Fatalf("another capacity within the retention = %v, want PermitsMismatchError", err)
	}
	advance(m, &now, time.Hour)
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("keys after the retention = %q, want none", keys)
	}
	b := mustSem(t, svc, "pool", semReq(5, 1, time.Minute))
	if b.Permits != 5 || b.Fence <= a.Fence {
		t.Errorf("lease after the retention = %+v, want 5 permits and a fence above %d", b, a.Fence)
	}
}

func TestSemaphoreMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc, _ := newTestService(t, locks.Config{Registerer: reg})
	a := mustSem(t, svc, "pool", semReq(1, 1, time.Minute))
	_, _ = svc.AcquireSemaphore(t.Context(), "pool", semReq(1, 1, time.Minute))
	_, _ = svc.AcquireSemaphore(t.Context(), "pool", semReq(2, 1, time.Minute))
	if _, err := svc.ReleaseSemaphore(t.Context(), "pool", a.Token); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"latchkey_semaphore_grants_total", nil, 1},
		{"latchkey_semaphore_conflicts_total", []string{"reason", "unavailable"}, 1},
		{"latchkey_semaphore_conflicts_total", []string{"reason", "permits"}, 1},
		{"latchkey_semaphore_releases_total", []string{"kind", "released"}, 1},
	} {
		if got := storetest.CounterValue(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// waitForSemWaiters waits until semaphore name has n waiters registered.
func waitForSemWaiters(t *testing.T, svc *locks.Service, name string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := mustSemState(t, svc, name, "")
		if st.Waiters == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiters = %d, want %d", st.Waiters, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
