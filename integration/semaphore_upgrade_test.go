package integration

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// TestSemaphoreLeasesOfTheLastVersionAreKept: leases the version before
// this one wrote (their values with no expiry, kept in a holders zset this
// version does not read, and no permits in use in the leases hash) still
// hold their permits, until the leases hash's own expiry at the latest;
// inspection sees them, and their holders renew and release them.
func TestSemaphoreLeasesOfTheLastVersionAreKept(t *testing.T) {
	e := newTestEnv(t)
	ctx := t.Context()
	k := locks.SemaphoreKeysOf(e.Prefix, "legacy")
	const fence = "1764000000000000"
	if err := e.RDB.HSet(ctx, k.Capacity, "p", 4, "f", fence, "m", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// two holders of the last version: one of 2 permits, one of 1
	if err := e.RDB.HSet(ctx, k.Leases, "oldtokenAAAAAAAAAAAAAA", "2:"+fence+":60000:0:0:0:svc-old",
		"oldtokenBBBBBBBBBBBBBB", "1:"+fence+":60000:0:0:0:").Err(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{k.Capacity, k.Leases} {
		if err := e.RDB.PExpire(ctx, key, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := e.Svc.InspectSemaphore(ctx, "legacy", "")
	if err != nil {
		t.Fatal(err)
	}
	if st.InUse != 3 || st.Holders != 2 || len(st.Leases) != 2 {
		t.Fatalf("state of the last version's leases = %+v, want 3 permits in use by 2 leases", st)
	}
	req := func(count int64) locks.SemaphoreRequest {
		return locks.SemaphoreRequest{AcquireRequest: locks.AcquireRequest{TTL: time.Minute}, Permits: 4, Count: count}
	}
	if _, err := e.Svc.AcquireSemaphore(ctx, "legacy", req(2)); !errors.As(err, new(*locks.PermitsUnavailableError)) {
		t.Fatalf("acquire 2 beside 3 permits held = %v, want too few permits free", err)
	}
	l, err := e.Svc.AcquireSemaphore(ctx, "legacy", req(1))
	if err != nil {
		t.Fatal(err)
	}
	if l.Available != 0 || l.Fence <= 1764000000000000 {
		t.Errorf("lease beside the last version's = %+v, want none left free and a later fence", l)
	}
	if _, err := e.Svc.RenewSemaphore(ctx, "legacy", "oldtokenBBBBBBBBBBBBBB", 0); err != nil {
		t.Errorf("renew a lease of the last version: %v", err)
	}
	if n, err := e.Svc.ReleaseSemaphore(ctx, "legacy", "oldtokenAAAAAAAAAAAAAA"); err != nil || n != 2 {
		t.Errorf("release a lease of the last version = %d, %v, want its 2 permits", n, err)
	}
	if _, err := e.Svc.ReleaseSemaphore(ctx, "legacy", "oldtokenAAAAAAAAAAAAAA"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("release it again = %v, want not found", err)
	}
	if st, err = e.Svc.InspectSemaphore(ctx, "legacy", ""); err != nil || st.InUse != 2 || st.Holders != 2 {
		t.Errorf("state after = %+v, %v, want 2 permits in use by 2 leases", st, err)
	}
}
