package integration

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/locks"
)

func TestLockLifecycle(t *testing.T) {
	e := newTestEnv(t)
	const name = "orders:nightly-export"

	// Acquire: 201, a fresh 22-character token, Location, the lease.
	r := e.do(t, "POST", "/v1/locks/"+name, `{"ttl":"10s"}`)
	wantStatus(t, r, http.StatusCreated)
	l := decodeAs[leaseJSON](t, r)
	tok := r.Header.Get("Lock-Token")
	if len(tok) != 22 || l.Token != tok {
		t.Fatalf("Lock-Token = %q (body token %q), want the same 22 characters", tok, l.Token)
	}
	if got, want := r.Header.Get("Location"), "/v1/locks/"+name; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	if l.Name != name || l.HoldCount != 1 || l.TTLMS != 10000 || l.Reentrant || l.Fence <= 0 {
		t.Errorf("lease = %+v, want name %s, hold_count 1, ttl_ms 10000, positive fence, not reentrant", l, name)
	}
	if d := time.Until(l.ExpiresAt); d < 8*time.Second || d > 12*time.Second {
		t.Errorf("expires_at %s is %s away, want about 10s", l.ExpiresAt, d)
	}
	if got := e.lockHash(t, name); got.Token != tok || got.Count != "1" || got.Fence != strconv.FormatInt(l.Fence, 10) {
		t.Errorf("lock hash in Redis = %+v, want the token, count 1 and fence %d", got, l.Fence)
	}

	// Reentrant acquire with the token: 200, hold_count 2, the same fence.
	r = e.do(t, "POST", "/v1/locks/"+name, `{"ttl":"10s"}`, "Lock-Token", tok)
	wantStatus(t, r, http.StatusOK)
	re := decodeAs[leaseJSON](t, r)
	if re.HoldCount != 2 || re.Fence != l.Fence || !re.Reentrant || re.Token != tok || r.Header.Get("Lock-Token") != tok {
		t.Errorf("reentrant lease = %+v, want hold_count 2, fence %d, reentrant, same token", re, l.Fence)
	}

	// Another client: 409 lock-held, Retry-After = holder's remaining TTL rounded up.
	r = e.do(t, "POST", "/v1/locks/"+name, "")
	p := wantProblem(t, r, http.StatusConflict, "lock-held")
	if p.Detail == "" {
		t.Error("lock-held problem has no detail")
	}
	if r.Header.Get("Lock-Token") != "" {
		t.Error("a refused acquire carries a Lock-Token header")
	}
	if strings.Contains(string(r.Body), tok) {
		t.Error("the lock-held problem reveals the holder's token")
	}
	pttl, err := e.RDB.PTTL(t.Context(), e.lockKey(name)).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The holder's TTL was refreshed to 10s; it is between pttl and 10s
	// when the 409 was computed, so Retry-After is ceil of that: 10, unless
	// the machine stalled for a whole second.
	if got, want := r.Header.Get("Retry-After"), strconv.Itoa(int(math.Ceil(pttl.Seconds()))); got != "10" && got != want {
		t.Errorf("Retry-After = %q, want 10 (the holder's remaining TTL of ~%s, rounded up)", got, pttl)
	}

	// Inspect without a token: state, no token anywhere, no owned.
	r = e.do(t, "GET", "/v1/locks/"+name, "")
	wantStatus(t, r, http.StatusOK)
	if strings.Contains(string(r.Body), tok) || strings.Contains(string(r.Body), `"token"`) {
		t.Errorf("inspect without a token reveals a token: %s", r.Body)
	}
	st := decodeAs[stateJSON](t, r)
	if !st.Held || st.HoldCount != 2 || st.Fence != l.Fence || st.Owned != nil || st.ExpiresAt == nil ||
		st.TTLMS <= 0 || st.TTLMS > 10000 {
		t.Errorf("state = %+v, want held, hold_count 2, fence %d, ttl in (0, 10000], expires_at, no owned", st, l.Fence)
	}
	// With the owner's token: owned true; with another token: owned false.
	if st := e.inspect(t, name, "Lock-Token", tok); st.Owned == nil || !*st.Owned {
		t.Errorf("inspect with the owner's token: owned = %v, want true", st.Owned)
	}
	other := locks.NewToken()
	if st := e.inspect(t, name, "Lock-Token", other); st.Owned == nil || *st.Owned {
		t.Errorf("inspect with another token: owned = %v, want false", st.Owned)
	}

	// Renew with an explicit TTL, then with the default (the lease's own TTL).
	r = e.do(t, "POST", "/v1/locks/"+name+"/renew", `{"ttl":"20s"}`, "Lock-Token", tok)
	wantStatus(t, r, http.StatusOK)
	rn := decodeAs[leaseJSON](t, r)
	if rn.TTLMS != 20000 || rn.Fence != l.Fence || rn.HoldCount != 2 || rn.Token != "" {
		t.Errorf("renewed lease = %+v, want ttl_ms 20000, fence %d, hold_count 2, no token in the body", rn, l.Fence)
	}
	if pttl, _ := e.RDB.PTTL(t.Context(), e.lockKey(name)).Result(); pttl <= 10*time.Second {
		t.Errorf("PTTL after renew to 20s = %s, want above 10s", pttl)
	}
	r = e.do(t, "POST", "/v1/locks/"+name+"/renew", "", "Lock-Token", tok)
	wantStatus(t, r, http.StatusOK)
	if rn := decodeAs[leaseJSON](t, r); rn.TTLMS != 20000 {
		t.Errorf("renew without ttl: ttl_ms = %d, want the lease's own 20000", rn.TTLMS)
	}
	// Renew with a token that does not own it: 409 not-owner; nothing changes.
	before := e.lockHash(t, name)
	wantProblem(t, e.do(t, "POST", "/v1/locks/"+name+"/renew", `{"ttl":"1s"}`, "Lock-Token", other),
		http.StatusConflict, "not-owner")
	// Release with a token that does not own it: 409 not-owner.
	wantProblem(t, e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", other), http.StatusConflict, "not-owner")
	if diff := cmp.Diff(before, e.lockHash(t, name)); diff != "" {
		t.Errorf("lock hash changed by requests of a non-owner (-before +after):\n%s", diff)
	}

	// Release: partial (hold_count 1, still held), then final.
	r = e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", tok)
	wantStatus(t, r, http.StatusOK)
	if got, want := decodeAs[releaseJSON](t, r), (releaseJSON{Released: false, HoldCount: 1}); got != want {
		t.Errorf("partial release = %+v, want %+v", got, want)
	}
	if st := e.inspect(t, name); !st.Held || st.HoldCount != 1 {
		t.Errorf("after a partial release: held %v hold_count %d, want held with 1", st.Held, st.HoldCount)
	}
	r = e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", tok)
	wantStatus(t, r, http.StatusOK)
	if got, want := decodeAs[releaseJSON](t, r), (releaseJSON{Released: true, HoldCount: 0}); got != want {
		t.Errorf("final release = %+v, want %+v", got, want)
	}
	if n, err := e.RDB.Exists(t.Context(), e.lockKey(name)).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS %s after the final release = %d (%v), want 0", e.lockKey(name), n, err)
	}
	if st := e.inspect(t, name); st.Held || st.HoldCount != 0 || st.ExpiresAt != nil || st.Fence != l.Fence {
		t.Errorf("state after release = %+v, want free, last fence %d", st, l.Fence)
	}

	// The released lease is gone: renew and release answer 404 lease-not-found.
	wantProblem(t, e.do(t, "POST", "/v1/locks/"+name+"/renew", "", "Lock-Token", tok), http.StatusNotFound, "lease-not-found")
	wantProblem(t, e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", tok), http.StatusNotFound, "lease-not-found")

	// The next grant gets a greater fence.
	if next := e.acquire(t, name, ""); next.Fence <= l.Fence || next.TTLMS != 30000 {
		t.Errorf("next grant: fence %d (want > %d), ttl_ms %d (want the default 30000)", next.Fence, l.Fence, next.TTLMS)
	}
}

func TestAcquireWithClientToken(t *testing.T) {
	e := newTestEnv(t)
	tok := "client-chosen_token-0123456789" // 30 base64url characters
	r := e.do(t, "POST", "/v1/locks/jobs.42", "", "Lock-Token", tok)
	wantStatus(t, r, http.StatusCreated)
	if got := r.Header.Get("Lock-Token"); got != tok {
		t.Errorf("Lock-Token = %q, want the client's %q", got, tok)
	}
	if got := e.lockHash(t, "jobs.42").Token; got != tok {
		t.Errorf("token in Redis = %q, want %q", got, tok)
	}
	// The same token re-enters; a second client with its own token is refused.
	wantStatus(t, e.do(t, "POST", "/v1/locks/jobs.42", "", "Lock-Token", tok), http.StatusOK)
	wantProblem(t, e.do(t, "POST", "/v1/locks/jobs.42", "", "Lock-Token", locks.NewToken()), http.StatusConflict, "lock-held")
	r = e.do(t, "DELETE", "/v1/locks/jobs.42", "", "Lock-Token", tok)
	if got := decodeAs[releaseJSON](t, r); got.HoldCount != 1 {
		t.Errorf("release = %+v, want hold_count 1", got)
	}
}

func TestLeaseExpiresInRedis(t *testing.T) {
	e := newTestEnv(t)
	const name = "short-lived"
	first := e.acquire(t, name, `{"ttl":"300ms"}`)
	wantProblem(t, e.do(t, "POST", "/v1/locks/"+name, ""), http.StatusConflict, "lock-held")

	deadline := time.Now().Add(5 * time.Second)
	for e.inspect(t, name).Held {
		if time.Now().After(deadline) {
			t.Fatal("a 300ms lease is still held after 5s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, _ := e.RDB.Exists(t.Context(), e.lockKey(name)).Result(); n != 0 {
		t.Errorf("lock key still exists after the lease expired")
	}
	// The expired holder can no longer renew or release.
	wantProblem(t, e.do(t, "POST", "/v1/locks/"+name+"/renew", "", "Lock-Token", first.Token), http.StatusNotFound, "lease-not-found")
	wantProblem(t, e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", first.Token), http.StatusNotFound, "lease-not-found")
	// Someone else gets it, with a greater fence.
	if next := e.acquire(t, name, ""); next.Fence <= first.Fence {
		t.Errorf("fence after expiry = %d, want > %d", next.Fence, first.Fence)
	}
}

func TestForceRelease(t *testing.T) {
	t.Run("admin key", func(t *testing.T) {
		e := newTestEnv(t)
		const name = "stuck-job"
		held := e.acquire(t, name, `{"ttl":"1h"}`)

		// A wrong credential is refused and changes nothing.
		for _, auth := range []string{"", "Bearer wrong-key-0123456789", testAdminKey, "Basic " + testAdminKey} {
			var hdr []string
			if auth != "" {
				hdr = []string{"Authorization", auth}
			}
			p := wantProblem(t, e.do(t, "DELETE", "/v1/locks/"+name+"?force=true", "", hdr...), http.StatusForbidden, "forbidden")
			if !strings.Contains(p.Detail, "Authorization: Bearer") {
				t.Errorf("Authorization %q: detail %q does not say which credential is needed", auth, p.Detail)
			}
		}
		if got := e.lockHash(t, name).Token; got != held.Token {
			t.Fatalf("a refused force-release changed the lock: token %q", got)
		}

		r := e.do(t, "DELETE", "/v1/locks/"+name+"?force=true", "", "Authorization", "Bearer "+testAdminKey)
		wantStatus(t, r, http.StatusNoContent)
		if len(r.Body) != 0 {
			t.Errorf("204 has a body: %q", r.Body)
		}
		if n, _ := e.RDB.Exists(t.Context(), e.lockKey(name)).Result(); n != 0 {
			t.Error("lock key still exists after force-release")
		}
		// The evicted holder has lost its lease.
		wantProblem(t, e.do(t, "POST", "/v1/locks/"+name+"/renew", "", "Lock-Token", held.Token), http.StatusNotFound, "lease-not-found")
		// Force-release bumped the fence above the evicted holder's (the
		// last fence shows it), and the next grant's fence is above both.
		bumped := e.inspect(t, name).Fence
		if bumped <= held.Fence {
			t.Errorf("last fence after force-release = %d, want bumped above the evicted %d", bumped, held.Fence)
		}
		if next := e.acquire(t, name, ""); next.Fence <= bumped {
			t.Errorf("fence after force-release = %d, want > %d (bumped; evicted %d)", next.Fence, bumped, held.Fence)
		}
		// Force-releasing a free lock is also 204.
		wantStatus(t, e.do(t, "DELETE", "/v1/locks/free-lock?force=true", "", "Authorization", "Bearer "+testAdminKey), http.StatusNoContent)
	})

	t.Run("no admin key configured", func(t *testing.T) {
		e := newTestEnv(t, withAdminKey(""))
		held := e.acquire(t, "stuck-job", "")
		r := e.do(t, "DELETE", "/v1/locks/stuck-job?force=true", "", "Authorization", "Bearer "+testAdminKey)
		p := wantProblem(t, r, http.StatusForbidden, "forbidden")
		if !strings.Contains(p.Detail, "no admin key configured") || !strings.Contains(p.Detail, "LATCHKEY_ADMIN_KEY") {
			t.Errorf("detail = %q, want it to say no admin key is configured (LATCHKEY_ADMIN_KEY)", p.Detail)
		}
		if got := e.lockHash(t, "stuck-job").Token; got != held.Token {
			t.Errorf("lock changed by a refused force-release: token %q", got)
		}
	})
}
