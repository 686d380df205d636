package locks_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// TestSemaphoreReleaseSaysThePermitsTheAdminSet: a release's wake-up
// counts the permits free under the capacity the admin set while the
// leases were held (the leases hash keeps a copy of it), the last lease's
// as well as the others'.
func TestSemaphoreReleaseSaysThePermitsTheAdminSet(t *testing.T) {
	_, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, locks.Config{})
	sub := subscribeAll(t, rdb)
	a := mustSem(t, svc, "pool", semReq(4, 2, time.Minute))
	b := mustSem(t, svc, "pool", semReq(4, 1, time.Minute))
	if _, err := svc.SetSemaphorePermits(t.Context(), "pool", 6); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{b.Token, a.Token} {
		if _, err := svc.ReleaseSemaphore(t.Context(), "pool", tok); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for len(got) < 2 {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		msg, err := sub.ReceiveMessage(ctx)
		cancel()
		if err != nil {
			t.Fatalf("wake-ups so far %q: %v", got, err)
		}
		if strings.HasPrefix(msg.Payload, "released:") {
			got = append(got, msg.Payload)
		}
	}
	if want := []string{"released:4", "released:6"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("releases under 6 permits said %q, want %q", got, want)
	}
}

// TestSemaphoreRecordIsKeptAgainAfterTheLastRelease: the release of the
// last lease keeps the capacity record for the retention only, and the
// next grant keeps it for its lease and the retention again; a renewal
// that reaches further moves it too.
func TestSemaphoreRecordIsKeptAgainAfterTheLastRelease(t *testing.T) {
	const retention = 10 * time.Minute
	svc, m := newTestService(t, locks.Config{FenceTTL: retention}, store.Config{KeyPrefix: "lk:"})
	const record = "lk:sem:lock:{pool}"
	for i := range 3 {
		l := mustSem(t, svc, "pool", semReq(3, 1, time.Minute))
		if ttl := m.TTL(record); ttl != time.Minute+retention {
			t.Fatalf("cycle %d: record TTL after a 1m grant = %s, want %s", i, ttl, time.Minute+retention)
		}
		if _, err := svc.RenewSemaphore(t.Context(), "pool", l.Token, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		if ttl := m.TTL(record); ttl != 2*time.Minute+retention {
			t.Fatalf("cycle %d: record TTL after a 2m renewal = %s, want %s", i, ttl, 2*time.Minute+retention)
		}
		if _, err := svc.ReleaseSemaphore(t.Context(), "pool", l.Token); err != nil {
			t.Fatal(err)
		}
		if ttl := m.TTL(record); ttl != retention {
			t.Fatalf("cycle %d: record TTL after the last release = %s, want the retention %s", i, ttl, retention)
		}
	}
}

// TestSemaphoreGrantForgetsTheTokensLostReason: a grant to a token the
// client chose forgets the reason an earlier lease of it was lost.
func TestSemaphoreGrantForgetsTheTokensLostReason(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	req := semReq(3, 1, time.Minute)
	req.Keepalive = true
	a := mustSem(t, svc, "pool", req)
	if _, err := svc.ForceReleaseSemaphore(t.Context(), "pool"); err != nil {
		t.Fatal(err)
	}
	if st := mustSemState(t, svc, "pool", a.Token); st.LostReason != locks.LostForceReleased {
		t.Fatalf("lost_reason after a force-release = %q, want %q", st.LostReason, locks.LostForceReleased)
	}
	again := semReq(3, 1, time.Minute)
	again.Token = a.Token
	mustSem(t, svc, "pool", again)
	if _, err := svc.ReleaseSemaphore(t.Context(), "pool", a.Token); err != nil {
		t.Fatal(err)
	}
	if st := mustSemState(t, svc, "pool", a.Token); st.LostReason != "" {
		t.Errorf("lost_reason after the token's next lease was released = %q, want none", st.LostReason)
	}
}

// TestSemaphoreKeysWrittenBeforeTheLeasesKeptTheCapacity: a capacity
// record that still has the m "0" and the expiry (x) the last layout
// wrote, and a leases hash with no capacity or record expiry beside its
// leases, are served as they are: a grant counts their lease and drops the
// record's old fields, never bringing the record's expiry forward, a
// renewal moves it on, and the old lease's release says the permits free.
func TestSemaphoreKeysWrittenBeforeTheLeasesKeptTheCapacity(t *testing.T) {
	_, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, locks.Config{FenceTTL: 10 * time.Minute}, store.Config{KeyPrefix: "lk:"})
	ctx := t.Context()
	k := locks.SemaphoreKeysOf("lk:", "pool")
	nowMS := t0.UnixMilli()
	at := func(d time.Duration) string { return strconv.FormatInt(nowMS+d.Milliseconds(), 10) }
	const fence = "1764000000000000"
	const old = "oldtokenAAAAAAAAAAAAAA"
	if err := rdb.HSet(ctx, k.Capacity, "p", 3, "f", fence, "m", "0", "x", at(20*time.Minute)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, k.Leases, old, "2:"+at(time.Minute)+":"+fence+":60000:0:0:0:",
		"#u", 2, "#e", at(time.Minute), "#x", at(2*time.Minute)).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.PExpire(ctx, k.Capacity, 20*time.Minute) // as kept for a lease of 10m, released
	rdb.PExpire(ctx, k.Leases, 2*time.Minute)

	l := mustSem(t, svc, "pool", semReq(3, 1, 5*time.Minute))
	if l.Available != 0 {
		t.Errorf("lease beside the old one of 2 permits: %d available, want 0", l.Available)
	}
	fields, err := rdb.HKeys(ctx, k.Capacity).Result()
	slices.Sort(fields)
	if err != nil || strings.Join(fields, " ") != "f p" {
		t.Errorf("capacity record fields after the grant = %q, %v, want p and f", fields, err)
	}
	if ttl := rdb.PTTL(ctx, k.Capacity).Val(); ttl != 20*time.Minute {
		t.Errorf("capacity record TTL after a 5m grant = %s, want the 20m0s it had (never brought forward)", ttl)
	}
	if _, err := svc.RenewSemaphore(ctx, "pool", l.Token, 15*time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, k.Capacity).Val(); ttl != 25*time.Minute {
		t.Errorf("capacity record TTL after a 15m renewal = %s, want the lease and the retention 25m0s", ttl)
	}
	if n, err := svc.ReleaseSemaphore(ctx, "pool", old); err != nil || n != 2 {
		t.Fatalf("release of the old lease = %d, %v, want its 2 permits", n, err)
	}
	if st := mustSemState(t, svc, "pool", ""); st.InUse != 1 || st.Permits != 3 || st.Fair {
		t.Errorf("state after = %+v, want 1 of 3 permits in use, plain", st)
	}
}
