package locks_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// TestListLostShowsEachPrimitivesLossesAndNoToken: a force-release of
// each primitive is listed under its kind with the reason, the lease's
// fence and owner and when it happened (the Redis clock), one entry per
// lease a semaphore lost; a released lease and a lock still held are
// not; no item carries a token.
func TestListLostShowsEachPrimitivesLossesAndNoToken(t *testing.T) {
	_, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, locks.Config{})
	ctx := t.Context()

	lock := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: time.Minute, Owner: "worker-1"})
	if _, err := svc.ForceRelease(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	released := mustAcquire(t, svc, "reports", locks.AcquireRequest{TTL: time.Minute, Owner: "worker-2"})
	if _, err := svc.Release(ctx, "reports", released.Token); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, svc, "still-held", locks.AcquireRequest{TTL: time.Minute})

	reader := mustAcquireRW(t, svc, "config", locks.AcquireRequest{TTL: time.Minute, Mode: locks.ModeRead, Owner: "reader-1"})
	if _, err := svc.ForceReleaseRW(ctx, "config"); err != nil {
		t.Fatal(err)
	}
	var semTokens []string
	for _, owner := range []string{"sem-a", "sem-b"} {
		l, err := svc.AcquireSemaphore(ctx, "pool", locks.SemaphoreRequest{
			AcquireRequest: locks.AcquireRequest{TTL: time.Minute, Owner: owner}, Permits: 3})
		if err != nil {
			t.Fatal(err)
		}
		semTokens = append(semTokens, l.Token)
	}
	if _, err := svc.ForceReleaseSemaphore(ctx, "pool"); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		kind   string
		name   string
		owners []string
		fence  int64
	}{
		{"lock", "orders", []string{"worker-1"}, lock.Fence},
		{"rwlock", "config", []string{"reader-1"}, reader.Fence},
		{"semaphore", "pool", []string{"sem-a", "sem-b"}, 0},
	} {
		p, err := svc.ListLost(ctx, tt.kind, locks.ListRequest{})
		if err != nil {
			t.Fatalf("ListLost(%s) = %v", tt.kind, err)
		}
		if len(p.Items) != 1 || p.Items[0].Name != tt.name || p.NextCursor != "" {
			t.Fatalf("ListLost(%s) = %+v, want only %s", tt.kind, p, tt.name)
		}
		var owners []string
		for _, l := range p.Items[0].Leases {
			owners = append(owners, l.Owner)
			if l.Reason != locks.LostForceReleased || !l.LostAt.Equal(t0) || l.Fence <= 0 {
				t.Errorf("%s %s lost %+v, want force_released at %v with its fence", tt.kind, tt.name, l, t0)
			}
			if tt.fence != 0 && l.Fence != tt.fence {
				t.Errorf("%s %s lost fence %d, want the lease's %d", tt.kind, tt.name, l.Fence, tt.fence)
			}
			for _, tok := range append(semTokens, lock.Token, reader.Token) {
				if strings.Contains(l.Owner+l.Reason, tok) {
					t.Errorf("%s %s lost %+v carries a token", tt.kind, tt.name, l)
				}
			}
		}
		slices.Sort(owners)
		if !slices.Equal(owners, tt.owners) {
			t.Errorf("%s %s lost leases of %v, want %v", tt.kind, tt.name, owners, tt.owners)
		}
	}
}

// TestListLostShowsALeaseOnlyOnceItEnded: a keep-alive lease renewed to
// its max-hold deadline has its loss recorded at that renewal, for the
// deadline; it is listed only once the Redis clock has passed it. Another tenant lists nothing of it, and a kind that is none
// of the primitives is an ErrInvalid naming kind.
func TestListLostShowsALeaseOnlyOnceItEnded(t *testing.T) {
	m, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, locks.Config{})
	ctx := t.Context()
	l := mustAcquire(t, svc, "nightly", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true, MaxHold: 5 * time.Second, Owner: "cron"})
	m.SetTime(t0.Add(3 * time.Second))
	if _, err := svc.Renew(ctx, "nightly", l.Token, 0); err != nil {
		t.Fatal(err)
	}

	if p, err := svc.ListLost(ctx, "lock", locks.ListRequest{}); err != nil || len(p.Items) != 0 {
		t.Fatalf("before the deadline ListLost = %+v, %v; want nothing", p, err)
	}
	m.SetTime(t0.Add(6 * time.Second))
	p, err := svc.ListLost(ctx, "lock", locks.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := t0.Add(5 * time.Second)
	if len(p.Items) != 1 || len(p.Items[0].Leases) != 1 || p.Items[0].Leases[0].Reason != "max_hold" ||
		!p.Items[0].Leases[0].LostAt.Equal(want) || p.Items[0].Leases[0].Owner != "cron" {
		t.Fatalf("after the deadline ListLost = %+v, want nightly lost to max_hold at %v by cron", p, want)
	}
	other := store.WithTenant(ctx, "acme")
	if p, err := svc.ListLost(other, "lock", locks.ListRequest{}); err != nil || len(p.Items) != 0 {
		t.Errorf("another tenant's ListLost = %+v, %v; want nothing", p, err)
	}
	var ve *store.ValidationError
	if _, err := svc.ListLost(ctx, "locks", locks.ListRequest{}); !errors.As(err, &ve) || ve.Field != "kind" {
		t.Errorf("ListLost(locks) = %v, want a validation error naming kind", err)
	}
}

// TestListLostKeepsTheNewestAtItsCap: a name that lost one lease more than
// MaxLostPerName lists MaxLostPerName of them, newest first, and says
// there were more; at the cap itself it lists them all and says nothing.
func TestListLostKeepsTheNewestAtItsCap(t *testing.T) {
	m, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, locks.Config{})
	ctx := t.Context()
	for i := range locks.MaxLostPerName + 1 {
		m.SetTime(t0.Add(time.Duration(i) * time.Second))
		mustAcquire(t, svc, "churn", locks.AcquireRequest{TTL: time.Minute})
		if _, err := svc.ForceRelease(ctx, "churn"); err != nil {
			t.Fatal(err)
		}
		p, err := svc.ListLost(ctx, "lock", locks.ListRequest{})
		if err != nil || len(p.Items) != 1 {
			t.Fatalf("after %d losses ListLost = %+v, %v", i+1, p, err)
		}
		st := p.Items[0]
		if want := min(i+1, locks.MaxLostPerName); len(st.Leases) != want || st.Truncated != (i+1 > locks.MaxLostPerName) {
			t.Fatalf("after %d losses: %d listed (truncated %v), want %d", i+1, len(st.Leases), st.Truncated, want)
		}
		if newest := t0.Add(time.Duration(i) * time.Second); !st.Leases[0].LostAt.Equal(newest) {
			t.Fatalf("after %d losses the first listed was lost at %v, want the newest, %v", i+1, st.Leases[0].LostAt, newest)
		}
	}
}
