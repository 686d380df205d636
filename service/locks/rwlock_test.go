package locks_test

import (
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

func mustAcquireRW(t *testing.T, svc *locks.Service, name string, req locks.AcquireRequest) locks.Lease {
	t.Helper()
	l, err := svc.AcquireRW(t.Context(), name, req)
	if err != nil {
		t.Fatalf("AcquireRW(%s, %s): %v", name, req.Mode, err)
	}
	return l
}

func mustInspectRW(t *testing.T, svc *locks.Service, name, token string) locks.RWState {
	t.Helper()
	st, err := svc.InspectRW(t.Context(), name, token)
	if err != nil {
		t.Fatalf("InspectRW: %v", err)
	}
	return st
}

func wantHeld(t *testing.T, err error) {
	t.Helper()
	var held *locks.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("error = %v, want a *HeldError", err)
	}
}

func TestRWReadersShareWritersExclude(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	ctx := t.Context()
	r1 := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeRead, TTL: 10 * time.Second})
	r2 := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeRead, TTL: 10 * time.Second})
	if r2.Fence <= r1.Fence {
		t.Errorf("second reader's fence %d, want above the first's %d", r2.Fence, r1.Fence)
	}
	if r1.Mode != locks.ModeRead || r1.Reentrant {
		t.Errorf("reader lease = %+v, want a new read lease", r1)
	}
	_, err := svc.AcquireRW(ctx, "doc", locks.AcquireRequest{Mode: locks.ModeWrite})
	wantHeld(t, err)
	st := mustInspectRW(t, svc, "doc", r1.Token)
	if st.WriteHeld || st.Readers != 2 || !st.Owned || st.Mode != locks.ModeRead || st.HoldCount != 1 {
		t.Errorf("state = %+v, want 2 readers, owned read", st)
	}
	for _, r := range []locks.Lease{r1, r2} {
		rel, err := svc.ReleaseRW(ctx, "doc", r.Token, "")
		if err != nil || !rel.Released || rel.Mode != locks.ModeRead {
			t.Fatalf("ReleaseRW = %+v, %v; want the read lease released", rel, err)
		}
	}
	w := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeWrite})
	if w.Fence <= r2.Fence {
		t.Errorf("writer's fence %d, want above the readers' %d", w.Fence, r2.Fence)
	}
	_, err = svc.AcquireRW(ctx, "doc", locks.AcquireRequest{Mode: locks.ModeRead})
	wantHeld(t, err)
	_, err = svc.AcquireRW(ctx, "doc", locks.AcquireRequest{Mode: locks.ModeWrite})
	wantHeld(t, err)
	// The exclusive lock of the same name is another lock.
	mustAcquire(t, svc, "doc", locks.AcquireRequest{})
}

func TestRWReentryDowngradeAndUpgrade(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	ctx := t.Context()
	w := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeWrite})
	again := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeWrite, Token: w.Token})
	if !again.Reentrant || again.HoldCount != 2 || again.Fence != w.Fence {
		t.Errorf("write re-entry = %+v, want reentrant, 2 holds, fence %d", again, w.Fence)
	}
	// downgrade: the writer takes read with its token, then drops write
	r := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeRead, Token: w.Token})
	if r.Reentrant || r.Fence <= w.Fence || r.Mode != locks.ModeRead {
		t.Errorf("downgrade read = %+v, want a new read lease with a fence above %d", r, w.Fence)
	}
	if st := mustInspectRW(t, svc, "doc", w.Token); len(st.Modes) != 2 || !st.WriteHeld || st.Readers != 1 {
		t.Errorf("during downgrade: %+v, want both modes held", st)
	}
	for range 2 {
		if rel, err := svc.ReleaseRW(ctx, "doc", w.Token, ""); err != nil || rel.Mode != locks.ModeWrite {
			t.Fatalf("ReleaseRW = %+v, %v; want the write lease", rel, err)
		}
	}
	other := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeRead})
	// upgrade refused, for the downgraded writer and any reader
	for _, tok := range []string{w.Token, other.Token} {
		_, err := svc.AcquireRW(ctx, "doc", locks.AcquireRequest{Mode: locks.ModeWrite, Token: tok})
		var up *locks.UpgradeError
		if !errors.As(err, &up) || !errors.Is(err, store.ErrConflict) {
			t.Errorf("upgrade: error = %v, want an *UpgradeError", err)
		}
	}
	// read re-entry
	r2 := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeRead, Token: other.Token})
	if !r2.Reentrant || r2.HoldCount != 2 || r2.Fence != other.Fence {
		t.Errorf("read re-entry = %+v, want reentrant with 2 holds", r2)
	}
	if rel, _ := svc.ReleaseRW(ctx, "doc", other.Token, locks.ModeRead); rel.Released || rel.HoldCount != 1 {
		t.Errorf("first read release = %+v, want one hold left", rel)
	}
}

func TestRWWaitingWriterBlocksNewReaders(t *testing.T) {
	for _, fair := range []bool{false, true} {
		svc, _ := newTestService(t, locks.Config{})
		ctx := t.Context()
		r1 := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeRead, Fair: fair})
		got := make(chan error, 1)
		go func() {
			_, err := svc.AcquireRW(ctx, "doc", locks.AcquireRequest{Mode: locks.ModeWrite, Fair: fair, Wait: 10 * time.Second})
			got <- err
		}()
		waitFor(t, "a waiting writer", func() bool { return mustInspectRW(t, svc, "doc", "").WaitingWriters == 1 })
		_, err := svc.AcquireRW(ctx, "doc", locks.AcquireRequest{Mode: locks.ModeRead, Fair: fair})
		wantHeld(t, err)
		// the reader already holding may re-enter
		mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeRead, Token: r1.Token, Fair: fair})
		for range 2 {
			if _, err := svc.ReleaseRW(ctx, "doc", r1.Token, ""); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-got; err != nil {
			t.Fatalf("fair=%v: waiting writer: %v, want the lease once the reader left", fair, err)
		}
		if st := mustInspectRW(t, svc, "doc", ""); !st.WriteHeld || st.WaitingWriters != 0 {
			t.Errorf("fair=%v: state %+v, want write held, nobody waiting", fair, st)
		}
	}
}

func TestRWExpiredReaderNeverBlocksAWriter(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	now := t0
	mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeRead, TTL: time.Second})
	long := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeRead, TTL: 5 * time.Second})
	advance(m, &now, 1500*time.Millisecond)
	if st := mustInspectRW(t, svc, "doc", ""); st.Readers != 1 {
		t.Errorf("readers after the short lease expired = %d, want 1", st.Readers)
	}
	if _, err := svc.ReleaseRW(t.Context(), "doc", long.Token, ""); err != nil {
		t.Fatal(err)
	}
	w := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeWrite})
	if w.Fence <= long.Fence {
		t.Errorf("writer's fence %d, want above %d", w.Fence, long.Fence)
	}
}

func TestRWForceReleaseEvictsEveryone(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	ctx := t.Context()
	a := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeRead})
	b := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeRead})
	if ok, err := svc.ForceReleaseRW(ctx, "doc"); err != nil || !ok {
		t.Fatalf("ForceReleaseRW = %v, %v", ok, err)
	}
	for _, l := range []locks.Lease{a, b} {
		st := mustInspectRW(t, svc, "doc", l.Token)
		if st.Owned || st.LostReason != locks.LostForceReleased || st.Fence <= b.Fence {
			t.Errorf("after force: %+v, want lost force_released, fence above %d", st, b.Fence)
		}
		if _, err := svc.ReleaseRW(ctx, "doc", l.Token, ""); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("release after force: %v, want ErrNotFound", err)
		}
	}
	if ok, _ := svc.ForceReleaseRW(ctx, "doc"); ok {
		t.Error("second force reported a removal")
	}
}

func TestRWKeepaliveRenewsReadersAndWriters(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	ctx := t.Context()
	now := t0
	r := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeRead, TTL: 3 * time.Second, Keepalive: true, MaxHold: 10 * time.Second})
	advance(m, &now, 2*time.Second)
	locks.RenewDueNow(ctx, svc)
	if st := mustInspectRW(t, svc, "doc", r.Token); st.TTL != 3*time.Second || st.Keepalive == nil {
		t.Errorf("reader after the renewer ran: %+v, want renewed to 3s", st)
	}
	for range 6 {
		advance(m, &now, 2*time.Second)
		locks.RenewDueNow(ctx, svc)
	}
	st := mustInspectRW(t, svc, "doc", r.Token)
	if st.Owned || st.LostReason != locks.LostMaxHold {
		t.Errorf("reader past max hold: %+v, want lost max_hold", st)
	}
	w := mustAcquireRW(t, svc, "doc", locks.AcquireRequest{Mode: locks.ModeWrite, TTL: 3 * time.Second, Keepalive: true})
	advance(m, &now, 2*time.Second)
	locks.RenewDueNow(ctx, svc)
	if st := mustInspectRW(t, svc, "doc", w.Token); st.TTL != 3*time.Second || st.Mode != locks.ModeWrite {
		t.Errorf("writer after the renewer ran: %+v, want renewed to 3s", st)
	}
	if _, err := svc.ReleaseRW(ctx, "doc", w.Token, ""); err != nil {
		t.Fatal(err)
	}
	if n, _ := m.ZMembers(locks.KeyPrefix(svc) + "keepalive"); len(n) != 0 {
		t.Errorf("registry after release = %v, want empty", n)
	}
}

func TestRWValidation(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	_, err := svc.AcquireRW(t.Context(), "doc", locks.AcquireRequest{})
	wantValidation(t, err, "mode", "oneof")
	_, err = svc.ReleaseRW(t.Context(), "doc", locks.NewToken(), "both")
	wantValidation(t, err, "mode", "oneof")
	_, err = svc.AcquireRW(t.Context(), "a{b", locks.AcquireRequest{Mode: locks.ModeRead})
	wantValidation(t, err, "name", "format")
}

var _ = miniredis.RunT
