package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// rwHold is one lease a client of a read/write lock was granted: its mode,
// fence and the interval it held it, on the test's one monotonic clock, from
// the grant's response to the release request (or, for a holder that
// vanished without releasing, to the end of its TTL counted from when its
// request was sent: the most it may assume).
type rwHold struct {
	write      bool
	fence      int64
	sent       time.Duration // the acquire request was sent: the grant came later
	start, end time.Duration
}

// TestRWLockInvariant has 32 clients contend for one read/write lock through
// two Latchkey instances on one Redis, for about three seconds: a quarter of
// the requests ask for write, every one waits up to a second, and some
// holders vanish without releasing (their short leases must expire, never
// block anyone). Then: no write interval overlaps any other interval; a
// lease whose interval ended before another lease was asked for has a
// smaller fence;
// every waiter is answered, granted or lock-held, within its wait plus a
// bound; both modes were granted; and the lock ends free.
func TestRWLockInvariant(t *testing.T) {
	a := newTestEnv(t)
	b := newTestEnv(t, beside(a))
	const (
		clients  = 32
		duration = 3 * time.Second
		name     = "rw-contended"
		wait     = time.Second
	)
	for _, e := range []*testEnv{a, b} {
		e.Client = &http.Client{Transport: &specTransport{t: t, router: loadSpecRouter(t),
			base: &http.Transport{MaxIdleConnsPerHost: clients}}}
	}
	base := time.Now()
	clock := func() time.Duration { return time.Since(base) } // monotonic
	var (
		mu       sync.Mutex
		holds    []rwHold
		timeouts int
		vanished int
		slowest  time.Duration
	)
	end := base.Add(duration)
	var wg sync.WaitGroup
	for c := range clients {
		e := []*testEnv{a, b}[c%2]
		wg.Go(func() {
			for time.Now().Before(end) && !t.Failed() {
				write := rand.IntN(4) == 0
				vanish := rand.IntN(40) == 0
				mode, ttl := "read", 5*time.Second
				if write {
					mode = "write"
				}
				if vanish {
					ttl = 300 * time.Millisecond
				}
				sent := clock()
				r := e.do(t, "POST", "/v1/rwlocks/"+name,
					fmt.Sprintf(`{"mode":%q,"ttl":%q,"wait":%q}`, mode, ttl, wait))
				got := clock()
				mu.Lock()
				slowest = max(slowest, got-sent)
				mu.Unlock()
				switch r.Status {
				case http.StatusCreated:
				case http.StatusConflict:
					if typ := r.JSON(t)["type"]; typ != "lock-held" {
						t.Errorf("409 of type %v, want lock-held", typ)
					}
					mu.Lock()
					timeouts++
					mu.Unlock()
					continue
				default:
					t.Errorf("acquire %s: status %d, body %s", mode, r.Status, r.Body)
					return
				}
				var l leaseJSON
				if err := json.Unmarshal(r.Body, &l); err != nil {
					t.Errorf("acquire: %v in %s", err, r.Body)
					return
				}
				if vanish {
					// valid for ttl from when it was asked for, at most; a
					// wait longer than that leaves it nothing it may rely on
					mu.Lock()
					holds = append(holds, rwHold{write: write, fence: l.Fence, sent: sent, start: got, end: max(got, sent+ttl)})
					vanished++
					mu.Unlock()
					continue
				}
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				rel := clock()
				mu.Lock()
				holds = append(holds, rwHold{write: write, fence: l.Fence, sent: sent, start: got, end: rel})
				mu.Unlock()
				r = e.do(t, "DELETE", "/v1/rwlocks/"+name, "", "Lock-Token", l.Token)
				if r.Status != http.StatusOK {
					t.Errorf("release: status %d, body %s", r.Status, r.Body)
					return
				}
			}
		})
	}
	wg.Wait()

	var reads, writes int
	for i, h := range holds {
		if h.write {
			writes++
		} else {
			reads++
		}
		for j, o := range holds {
			if i == j {
				continue
			}
			if h.write && h.start < o.end && o.start < h.end {
				t.Errorf("a writer (fence %d, %s-%s) held together with a %s (fence %d, %s-%s)",
					h.fence, h.start, h.end, modeName(o.write), o.fence, o.start, o.end)
			}
			if h.end < o.sent && h.fence >= o.fence {
				t.Errorf("fence %d was asked for after the lease of fence %d had ended: fences must increase", o.fence, h.fence)
			}
		}
	}
	if reads == 0 || writes == 0 {
		t.Errorf("%d read and %d write grants: want both modes granted", reads, writes)
	}
	if bound := wait + 5*time.Second; slowest > bound {
		t.Errorf("the slowest answer took %s, want every waiter answered within %s", slowest, bound)
	}
	eventually(t, eventGuard, "the lock is free once the vanished holders' leases expire", func() bool {
		var st map[string]any
		r := a.do(t, "GET", "/v1/rwlocks/"+name, "")
		_ = json.Unmarshal(r.Body, &st)
		return st["write_held"] == false && st["readers"] == 0.0
	})
	t.Logf("%d read grants, %d write grants (%d holders vanished), %d waits timed out, slowest answer %s",
		reads, writes, vanished, timeouts, slowest)
}

func modeName(write bool) string {
	if write {
		return "writer"
	}
	return "reader"
}

// The Lua scripts of the read/write lock on real Redis: reentry, downgrade,
// refused upgrade, a waiting writer ahead of new readers, force release.
func TestRWLockScriptsOnRealRedis(t *testing.T) {
	e := newTestEnv(t)
	ctx := t.Context()
	svc := e.Svc
	acq := func(mode locks.RWMode, tok string) (locks.Lease, error) {
		return svc.AcquireRW(ctx, "rw-scripts", locks.AcquireRequest{Mode: mode, Token: tok, TTL: 10 * time.Second})
	}
	w, err := acq(locks.ModeWrite, "")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := acq(locks.ModeWrite, w.Token); err != nil || !again.Reentrant || again.HoldCount != 2 {
		t.Fatalf("write re-entry = %+v, %v", again, err)
	}
	if _, err := acq(locks.ModeRead, ""); err == nil {
		t.Fatal("a reader was granted while a writer holds")
	}
	down, err := acq(locks.ModeRead, w.Token)
	if err != nil || down.Fence <= w.Fence {
		t.Fatalf("downgrade = %+v, %v; want a read lease above fence %d", down, err, w.Fence)
	}
	for range 2 {
		if rel, err := svc.ReleaseRW(ctx, "rw-scripts", w.Token, locks.ModeWrite); err != nil || rel.Mode != locks.ModeWrite {
			t.Fatalf("release write: %+v, %v", rel, err)
		}
	}
	other, err := acq(locks.ModeRead, "")
	if err != nil {
		t.Fatalf("a second reader after the downgrade: %v", err)
	}
	if _, err := acq(locks.ModeWrite, other.Token); err == nil {
		t.Fatal("an upgrade was granted")
	} else if _, ok := err.(*locks.UpgradeError); !ok {
		t.Fatalf("upgrade: %v, want an *UpgradeError", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := svc.AcquireRW(ctx, "rw-scripts", locks.AcquireRequest{Mode: locks.ModeWrite, TTL: 10 * time.Second, Wait: 20 * time.Second})
		done <- err
	}()
	eventually(t, eventGuard, "the writer waits", func() bool {
		st, err := svc.InspectRW(ctx, "rw-scripts", "")
		return err == nil && st.WaitingWriters == 1
	})
	if _, err := acq(locks.ModeRead, ""); err == nil {
		t.Fatal("a new reader passed a waiting writer")
	}
	if ok, err := svc.ForceReleaseRW(ctx, "rw-scripts"); err != nil || !ok {
		t.Fatalf("force: %v, %v", ok, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiting writer after the force release: %v", err)
	}
	st, err := svc.InspectRW(ctx, "rw-scripts", other.Token)
	if err != nil || !st.WriteHeld || st.LostReason != locks.LostForceReleased {
		t.Fatalf("after force: %+v, %v", st, err)
	}
}

// A keep-alive read lease taken through instance A outlives A's hard death:
// instance B's renewer renews it.
func TestRWLockKeepaliveSurvivesInstanceCrash(t *testing.T) {
	a := newTestEnv(t, withRenewer(instancePoll))
	b := newTestEnv(t, beside(a), withRenewer(instancePoll))
	r := a.do(t, "POST", "/v1/rwlocks/rw-ka", `{"mode":"read","ttl":"2s","keepalive":true}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("acquire: %d %s", r.Status, r.Body)
	}
	tok := r.Token()
	a.kill()
	before := metricValue(t, b, "latchkey_keepalive_renewals_total")
	// One renewal every ttl/3: four are more than a TTL of A's absence.
	eventually(t, 3*eventGuard, "B renews the lease four times", func() bool {
		return metricValue(t, b, "latchkey_keepalive_renewals_total")-before >= 4
	})
	st := b.do(t, "GET", "/v1/rwlocks/rw-ka", "", "Lock-Token", tok).JSON(t)
	if st["owned"] != true || st["mode"] != "read" || st["readers"] != 1.0 {
		t.Fatalf("after A died and B renewed: %v, want the read lease owned", st)
	}
	// a writer waits for it and gets it once it is released through B
	got := make(chan response, 1)
	go func() { got <- b.send(t.Context(), "POST", "/v1/rwlocks/rw-ka", `{"mode":"write","wait":"20s"}`) }()
	eventually(t, eventGuard, "the writer waits", func() bool {
		return b.do(t, "GET", "/v1/rwlocks/rw-ka", "").JSON(t)["waiters"].(map[string]any)["write"] == 1.0
	})
	if r := b.do(t, "DELETE", "/v1/rwlocks/rw-ka", "", "Lock-Token", tok); r.Status != http.StatusOK {
		t.Fatalf("release: %d %s", r.Status, r.Body)
	}
	if r := <-got; r.Status != http.StatusCreated {
		t.Fatalf("waiting writer: %d %s", r.Status, r.Body)
	}
	if n := b.registrySize(t); n != 0 {
		t.Errorf("registry holds %d entries after the keep-alive lease was released, want 0", n)
	}
}

// A hold stream of a read lease: acquired and renewed events; a writer's
// force release ends it with lost/force_released. When the instance that
// holds a stream is killed, the lease is not renewed: it expires, and a
// writer gets the lock.
func TestRWLockHold(t *testing.T) {
	a := newTestEnv(t, withShortStreams())
	h := a.openHoldAt(t, "/v1/rwlocks/rw-hold/hold", `{"mode":"read","ttl":"1500ms"}`)
	if h.Status != http.StatusOK {
		t.Fatalf("hold: %d %s", h.Status, h.Body)
	}
	if ev := h.next(t, eventGuard, false); ev.Name != "acquired" || ev.Data["mode"] != "read" {
		t.Fatalf("first event %+v, want acquired read", ev)
	}
	if ev := h.next(t, eventGuard, false); ev.Name != "renewed" {
		t.Fatalf("second event %+v, want renewed", ev)
	}
	if r := a.do(t, "DELETE", "/v1/rwlocks/rw-hold?force=true", "", "Authorization", "Bearer "+testAdminKey); r.Status != http.StatusNoContent {
		t.Fatalf("force: %d %s", r.Status, r.Body)
	}
	ev := h.next(t, eventGuard, false)
	for ev.Name == "renewed" { // renewals made before the force release
		ev = h.next(t, eventGuard, false)
	}
	if ev.Name != "lost" || ev.Data["reason"] != locks.LostForceReleased {
		t.Fatalf("after force: %+v, want lost force_released", ev)
	}

	b := newTestEnv(t, withShortStreams())
	c := newTestEnv(t, beside(b))
	h2 := b.openHoldAt(t, "/v1/rwlocks/rw-crash/hold", `{"mode":"read","ttl":"1500ms"}`)
	if h2.Status != http.StatusOK {
		t.Fatalf("hold: %d %s", h2.Status, h2.Body)
	}
	h2.next(t, eventGuard, false)
	b.kill()
	r := c.do(t, "POST", "/v1/rwlocks/rw-crash", `{"mode":"write","wait":"20s"}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("a writer after the holding instance died: %d %s", r.Status, r.Body)
	}
}

// TestRWLockHoldWithCurl: a read lease held by `curl -N`; when the curl
// process is killed (SIGKILL), the lease is released, not left to expire,
// and a waiting writer gets the lock.
func TestRWLockHoldWithCurl(t *testing.T) {
	e := newTestEnv(t, withShortStreams())
	cmd, lines := curlHold(t, e.URL+"/v1/rwlocks/rw-curl/hold", `{"mode":"read","ttl":"30s"}`)
	for lines.Scan() && lines.Text() != "event: acquired" {
	}
	got := make(chan response, 1)
	go func() { got <- e.send(t.Context(), "POST", "/v1/rwlocks/rw-curl", `{"mode":"write","wait":"20s"}`) }()
	eventually(t, eventGuard, "the writer waits", func() bool {
		return e.do(t, "GET", "/v1/rwlocks/rw-curl", "").JSON(t)["waiters"].(map[string]any)["write"] == 1.0
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The lease's 30s TTL is far longer than the wait below: the release is what frees it.
	if r := <-got; r.Status != http.StatusCreated {
		t.Fatalf("waiting writer after curl was killed: %d %s", r.Status, r.Body)
	}
	if got := metricValue(t, e, `latchkey_rwlock_releases_total{kind="final",mode="read"}`); got != 1 {
		t.Errorf("read releases = %v, want 1 (the hold's)", got)
	}
}

// expireReader moves the expiry of token's read lease of the read/write
// lock name to atMS (Redis clock, ms), as time would, leaving its field in
// the state hash: the reader's own expiry and the state's soonest one.
func expireReader(t *testing.T, e *testEnv, name, token string, atMS int64) {
	t.Helper()
	ctx := t.Context()
	state := locks.RWKeysOf(e.Prefix, name).State
	v, err := e.RDB.HGet(ctx, state, token).Result()
	if err != nil {
		t.Fatalf("the reader's field of %s: %v", name, err)
	}
	f := strings.SplitN(v, ",", 8) // n,l,f,ku,kh,kb,x,o
	if len(f) != 8 {
		t.Fatalf("the reader's field of %s is %q, want n,l,f,ku,kh,kb,x,o", name, v)
	}
	f[6] = strconv.FormatInt(atMS, 10)
	if err := e.RDB.HSet(ctx, state, token, strings.Join(f, ","), "rlo", atMS).Err(); err != nil {
		t.Fatal(err)
	}
}
