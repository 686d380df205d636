package integration

import (
	"net/http"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// loseToMaxHold gives token a keep-alive lease on name whose max_hold is its
// TTL, and re-enters it once its TTL has begun to run: the re-entry's TTL
// is cut to the max-hold deadline, which records why the lease will end (no
// renewer runs here). It waits until the lease is gone and reported lost.
func (e *testEnv) loseToMaxHold(t *testing.T, name, token string) {
	t.Helper()
	wantStatus(t, e.do(t, "POST", "/v1/locks/"+name, `{"ttl":"1s","keepalive":true,"max_hold":"1s"}`, "Lock-Token", token),
		http.StatusCreated)
	eventually(t, 5*time.Second, name+"'s TTL to run", func() bool {
		pttl, err := e.RDB.PTTL(t.Context(), e.lockKey(name)).Result()
		return err == nil && pttl < time.Second
	})
	wantStatus(t, e.do(t, "POST", "/v1/locks/"+name, `{"ttl":"1s"}`, "Lock-Token", token), http.StatusOK)
	eventually(t, 5*time.Second, token+" lost to max_hold", func() bool {
		return e.inspectAs(t, name, token).LostReason == locks.LostMaxHold
	})
}

// A new grant forgets why its token lost an earlier lease: a client that
// takes the lock again with the same token, keep-alive or not, never sees
// the old reason for the new lease. Other tokens' reasons stay.
func TestNewGrantClearsLostReason(t *testing.T) {
	for _, body := range []string{`{"ttl":"100ms"}`, `{"ttl":"100ms","fair":true}`, `{"ttl":"100ms","wait":"1s"}`} {
		t.Run(body, func(t *testing.T) {
			e := newTestEnv(t)
			other, reused := locks.NewToken(), locks.NewToken()
			e.loseToMaxHold(t, "reused", other)
			e.loseToMaxHold(t, "reused", reused)

			e.acquire(t, "reused", body, "Lock-Token", reused)
			e.waitFree(t, "reused", 5*time.Second)
			if st := e.inspectAs(t, "reused", reused); st.LostReason != "" {
				t.Errorf("after a new lease that expired: %v, want no lost_reason (the max_hold loss was an earlier lease's)", st)
			}
			if st := e.inspectAs(t, "reused", other); st.LostReason != locks.LostMaxHold {
				t.Errorf("another token's state: %v, want lost_reason max_hold kept", st)
			}
		})
	}
}
