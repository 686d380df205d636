package integration

import (
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// grantAndRelease takes name, lets it go and returns the grant's fence.
func (e *testEnv) grantAndRelease(t *testing.T, name string) int64 {
	t.Helper()
	l := e.acquire(t, name, `{"ttl":"10s"}`)
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", l.Token), http.StatusOK)
	return l.Fence
}

// setCounterBack puts name's fence counter back to an older value with its
// TTL kept: the state after a partial loss (an AOF written every second
// that lost its last second, a failover to a replica that lagged), where the
// counter is present but behind the fences already handed out.
func (e *testEnv) setCounterBack(t *testing.T, name string, to int64) {
	t.Helper()
	if err := e.RDB.SetArgs(t.Context(), e.fenceKey(name), to, redis.SetArgs{KeepTTL: true}).Err(); err != nil {
		t.Fatal(err)
	}
}

// Fences stay above every fence issued before when the counter survives a
// partial loss behind what was handed out: a new grant's fence is the
// larger of counter + 1 and Redis TIME in µs.
func TestFencesAfterPartialLoss(t *testing.T) {
	e := newTestEnv(t)
	const name = "ledger"
	var fences []int64
	for range 5 {
		before, err := e.RDB.Time(t.Context()).Result()
		if err != nil {
			t.Fatal(err)
		}
		f := e.grantAndRelease(t, name)
		// The fence is the grant's time on the Redis clock, not a count.
		if f < before.UnixMicro() {
			t.Errorf("fence %d is below Redis TIME %d µs before the grant", f, before.UnixMicro())
		}
		fences = append(fences, f)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences %v do not strictly increase", fences)
		}
	}
	// Once released, the counter is kept for the fence retention, as a compact integer.
	fenceTTL := e.Svc.lockService.Config().FenceTTL
	if ttl, err := e.RDB.PTTL(t.Context(), e.fenceKey(name)).Result(); err != nil || ttl < fenceTTL-time.Minute {
		t.Errorf("fence counter TTL = %s (%v), want about %s", ttl, err, fenceTTL)
	}
	if enc, err := e.RDB.ObjectEncoding(t.Context(), e.fenceKey(name)).Result(); err != nil || enc != "int" {
		t.Errorf("fence counter encoding = %q (%v), want int", enc, err)
	}

	last := fences[len(fences)-1]
	e.setCounterBack(t, name, fences[0])
	after := e.grantAndRelease(t, name)
	if after <= last {
		t.Fatalf("fence after the counter went back to %d = %d, want > %d, every fence issued before", fences[0], after, last)
	}

	// A force-release after a partial loss still leaves the evicted
	// holder's fence stale: the bump, and the next grant, are above it.
	held := e.acquire(t, name, `{"ttl":"1h"}`)
	e.setCounterBack(t, name, fences[0])
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name+"?force=true", "", "Authorization", "Bearer "+testAdminKey),
		http.StatusNoContent)
	if st := e.inspect(t, name); st.Fence <= held.Fence {
		t.Errorf("last fence after force-release = %d, want above the evicted holder's %d", st.Fence, held.Fence)
	}
	bumped := e.inspect(t, name).Fence
	if next := e.grantAndRelease(t, name); next <= bumped || next <= held.Fence {
		t.Errorf("fence after force-release = %d, want above the bumped %d and the evicted %d", next, bumped, held.Fence)
	}
}
