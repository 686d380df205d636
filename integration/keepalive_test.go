package integration

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

func TestKeepaliveValidation(t *testing.T) {
	e := newTestEnv(t, withServiceConfig(func(sc *serviceConfig) { sc.MaxHoldCap = time.Hour }))
	tests := []struct {
		body, field, rule, detail string
	}{
		{`{"keepalive":true,"max_hold":"2h"}`, "max_hold", "max", "max_hold must be at most 1h0m0s"},
		{`{"max_hold":"1m"}`, "max_hold", "keepalive", "keepalive: true"},
		{`{"keepalive":false,"heartbeat":"5s"}`, "heartbeat", "keepalive", "keepalive: true"},
		{`{"keepalive":true,"heartbeat":"2h"}`, "heartbeat", "max", "heartbeat must be at most 1h0m0s"},
		{`{"keepalive":true,"heartbeat":"soon"}`, "heartbeat", "posduration", "positive duration"},
		{`{"keepalive":true,"max_hold":"-1s"}`, "max_hold", "posduration", "positive duration"},
		{`{"keepalive":"yes"}`, "keepalive", "type", "boolean"},
	}
	for _, tc := range tests {
		t.Run(tc.body, func(t *testing.T) {
			r := e.do(t, "POST", "/v1/locks/ka-bad", tc.body)
			if r.Status != http.StatusBadRequest {
				t.Fatalf("status = %d, want 400; body %s", r.Status, r.Body)
			}
			p := r.JSON(t)
			errs, _ := p["errors"].([]any)
			if len(errs) == 0 {
				t.Fatalf("no errors member in %s", r.Body)
			}
			fe := errs[0].(map[string]any)
			if fe["field"] != tc.field || fe["rule"] != tc.rule {
				t.Errorf("errors[0] = %v/%v, want %s/%s", fe["field"], fe["rule"], tc.field, tc.rule)
			}
			if d, _ := p["detail"].(string); !strings.Contains(d, tc.detail) {
				t.Errorf("detail = %q, want it to contain %q", d, tc.detail)
			}
			if ks := e.keys(t); len(ks) != 0 {
				t.Errorf("keys after a refused acquire = %v, want none", ks)
			}
		})
	}
}

// A keep-alive lease with ttl 3s stays held while its holder heartbeats,
// and is lost (heartbeat_missed) once the heartbeats stop. A heartbeat
// comes every 300ms and two requests, well within the 2s it is due in.
func TestKeepaliveHeartbeat(t *testing.T) {
	a := newTestEnv(t, withRenewer(instancePoll))
	tok := a.acquireKeepalive(t, "ka-hb", `{"ttl":"3s","keepalive":true,"heartbeat":"2s"}`)

	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r := a.do(t, "POST", "/v1/locks/ka-hb/renew", "", "Lock-Token", tok)
		if r.Status != http.StatusOK {
			t.Fatalf("heartbeat = %d %s, want 200", r.Status, r.Body)
		}
		time.Sleep(300 * time.Millisecond)
		st := a.inspectAs(t, "ka-hb", tok)
		if !st.Held || !st.ownedIs(true) {
			t.Fatalf("while heartbeating: state %v, want held and owned", st)
		}
		ka := st.Keepalive
		if ka == nil || ka.HeartbeatMS != 2000 || ka.HeartbeatDue == nil || ka.MaxHoldUntil.IsZero() {
			t.Fatalf("while heartbeating: keepalive %v, want heartbeat_ms 2000, heartbeat_due and max_hold_until", ka)
		}
	}
	if got := metricValue(t, a, "latchkey_keepalive_renewals_total"); got < 5 {
		t.Errorf("renewals = %v after 10s of a 3s lease, want at least 5", got)
	}

	// Heartbeats stop: renewals stop within the heartbeat, then the TTL runs out.
	took := a.waitFree(t, "ka-hb", 2*time.Second+3*time.Second+10*time.Second)
	t.Logf("lease gone %s after the last heartbeat", took)
	st := a.inspectAs(t, "ka-hb", tok)
	if !st.ownedIs(false) || st.LostReason != "heartbeat_missed" {
		t.Errorf("after heartbeats stopped: state %v, want owned false, lost_reason heartbeat_missed", st)
	}
	eventually(t, 10*time.Second, "registry to drop the lost lease", func() bool { return a.registrySize(t) == 0 })
	if got := metricValue(t, a, `latchkey_keepalive_renewal_failures_total{reason="heartbeat_missed"}`); got < 1 {
		t.Errorf(`renewal failures{reason="heartbeat_missed"} = %v, want at least 1`, got)
	}
}

// A late heartbeat, while the lease still lives, resumes the renewals.
func TestKeepaliveLateHeartbeatResumes(t *testing.T) {
	a := newTestEnv(t, withRenewer(instancePoll))
	tok := a.acquireKeepalive(t, "ka-late", `{"ttl":"3s","keepalive":true,"heartbeat":"300ms"}`)
	time.Sleep(1500 * time.Millisecond) // heartbeat missed, lease still alive (ttl 3s)
	if st := a.inspectAs(t, "ka-late", tok); !st.ownedIs(true) {
		t.Fatalf("before the late heartbeat: %v, want owned", st)
	}
	for range 15 { // 3s of heartbeats: the lease is renewed past its TTL
		if r := a.do(t, "POST", "/v1/locks/ka-late/renew", "", "Lock-Token", tok); r.Status != http.StatusOK {
			t.Fatalf("heartbeat = %d %s", r.Status, r.Body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	st := a.inspectAs(t, "ka-late", tok)
	if !st.ownedIs(true) || st.LostReason != "" {
		t.Fatalf("after resumed heartbeats: %v, want owned and no lost_reason", st)
	}
}

// A keep-alive lease is renewed past its TTL but never past max_hold, even
// with two instances racing to renew it, and it ends at max_hold: its lost
// reason says so, not a lapse of the renewals.
func TestKeepaliveMaxHold(t *testing.T) {
	fast := withServiceConfig(func(sc *serviceConfig) { sc.RenewPoll = time.Millisecond })
	a := newTestEnv(t, withRenewer(instancePoll), fast)
	newTestEnv(t, beside(a), withRenewer(instancePoll), fast)
	r := a.do(t, "POST", "/v1/locks/ka-max", `{"ttl":"2s","keepalive":true,"max_hold":"5s"}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("acquire = %d %s", r.Status, r.Body)
	}
	tok := r.Header.Get("Lock-Token")
	l := decodeAs[leaseJSON](t, r)
	if l.Keepalive == nil {
		t.Fatalf("acquire answered no keepalive: %s", r.Body)
	}
	until := l.Keepalive.MaxHoldUntil
	// expires_at is the store's clock plus PTTL, both in whole milliseconds:
	// allow it 1ms of rounding.
	pastMaxHold := func(exp time.Time) bool { return exp.After(until.Add(time.Millisecond)) }
	eventually(t, 10*time.Second, "the lease is renewed past its first expiry", func() bool {
		st := a.inspectAs(t, "ka-max", tok)
		if !st.ownedIs(true) {
			t.Fatalf("%v, want owned (renewed past its 2s TTL)", st)
		}
		if pastMaxHold(*st.ExpiresAt) {
			t.Fatalf("expires_at %s is past max_hold_until %s", *st.ExpiresAt, until)
		}
		return st.ExpiresAt.After(l.ExpiresAt)
	})
	// A heartbeat-less renew by hand cannot pass max_hold either.
	rr := a.do(t, "POST", "/v1/locks/ka-max/renew", `{"ttl":"10s"}`, "Lock-Token", tok)
	if rr.Status != http.StatusOK {
		t.Fatalf("renew = %d %s", rr.Status, rr.Body)
	}
	if exp, _ := time.Parse(time.RFC3339Nano, rr.JSON(t)["expires_at"].(string)); pastMaxHold(exp) {
		t.Fatalf("renew by hand: expires_at %s is past max_hold_until %s", exp, until)
	}
	a.waitFree(t, "ka-max", 30*time.Second)
	st := a.inspectAs(t, "ka-max", tok)
	if !st.ownedIs(false) || st.LostReason != "max_hold" {
		t.Errorf("after max_hold: %v, want owned false, lost_reason max_hold", st)
	}
}

// Release stops the renewals at once: no renewal follows it, and the owner
// is not told it lost anything.
func TestKeepaliveReleaseStopsRenewal(t *testing.T) {
	a := newTestEnv(t, withRenewer(instancePoll))
	tok := a.acquireKeepalive(t, "ka-rel", `{"ttl":"1s","keepalive":true}`)
	eventually(t, 10*time.Second, "the lease is renewed once", func() bool {
		return metricValue(t, a, "latchkey_keepalive_renewals_total") >= 1
	})
	if st := a.inspectAs(t, "ka-rel", tok); !st.ownedIs(true) {
		t.Fatalf("before release: %v, want owned", st)
	}
	if r := a.do(t, "DELETE", "/v1/locks/ka-rel", "", "Lock-Token", tok); r.Status != http.StatusOK {
		t.Fatalf("release = %d %s", r.Status, r.Body)
	}
	if n := a.registrySize(t); n != 0 {
		t.Errorf("registry after release = %d entries, want 0", n)
	}
	renewals := metricValue(t, a, "latchkey_keepalive_renewals_total")
	time.Sleep(time.Second)
	st := a.inspectAs(t, "ka-rel", tok)
	if st.Held || st.LostReason != "" {
		t.Errorf("after release: %v, want not held and no lost_reason", st)
	}
	if got := metricValue(t, a, "latchkey_keepalive_renewals_total"); got != renewals {
		t.Errorf("renewals went from %v to %v after the release, want none", renewals, got)
	}
}

// A renewal batch that read the registry before a release and runs after it
// does not bring the lease back.
func TestKeepaliveReleaseDuringBatch(t *testing.T) {
	rdb, _ := newRedis(t)
	prefix := uniquePrefix()
	gc := &gatedClient{Client: rdb, entered: make(chan []any, 1), gate: make(chan struct{}), ran: make(chan error, 1)}
	slow := newTestEnv(t, withRedisClient(rdb, ""), withPrefix(prefix), withRenewer(instancePoll), withClientOf(func(redis.UniversalClient) store.Client { return gc }), withServiceConfig(func(sc *serviceConfig) { sc.OpTimeout = 10 * time.Second }))
	t.Cleanup(func() {
		select {
		case <-gc.gate:
		default:
			close(gc.gate)
		}
	})
	tok := slow.acquireKeepalive(t, "ka-race", `{"ttl":"5s","keepalive":true}`)

	var args []any
	select {
	case args = <-gc.entered: // the batch holding our lease is in flight
	case <-time.After(20 * time.Second):
		t.Fatal("no renewal batch started")
	}
	if !strings.Contains(fmt.Sprint(args), ":ka-race") {
		t.Fatalf("batch args %v do not name ka-race", args)
	}
	if r := slow.do(t, "DELETE", "/v1/locks/ka-race", "", "Lock-Token", tok); r.Status != http.StatusOK {
		t.Fatalf("release = %d %s", r.Status, r.Body)
	}
	// Someone else takes the free name with a plain 500ms lease, before the
	// stale batch runs: that batch must neither revive the released lease
	// nor extend the new one.
	other := slow.do(t, "POST", "/v1/locks/ka-race", `{"ttl":"500ms"}`)
	if other.Status != http.StatusCreated {
		t.Fatalf("acquire by another = %d %s, want 201", other.Status, other.Body)
	}
	close(gc.gate) // the batch now runs, after the release
	select {
	case err := <-gc.ran:
		if err != nil {
			t.Fatalf("the stale batch: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stale batch did not run")
	}
	// The stale batch would have set the keep-alive lease's 5s.
	if pttl := slow.RDB.PTTL(t.Context(), slow.lockKey("ka-race")).Val(); pttl > 500*time.Millisecond {
		t.Errorf("the other's 500ms lease has %s left after the stale batch: it was extended", pttl)
	}
	slow.waitFree(t, "ka-race", 10*time.Second)
	if n := slow.registrySize(t); n != 0 {
		t.Errorf("registry = %d entries, want 0", n)
	}
	if st := slow.inspectAs(t, "ka-race", tok); st.Held || st.LostReason != "" {
		t.Errorf("released owner sees %v, want not held and no lost_reason", st)
	}
	if got := metricValue(t, slow, "latchkey_keepalive_renewals_total"); got != 0 {
		t.Errorf("renewals = %v, want 0", got)
	}
}

// Acquire, renew and release hammered from many goroutines while two
// renewers run flat out: when the dust settles no lease is left behind.
func TestKeepaliveReleaseRaceHammer(t *testing.T) {
	fast := withServiceConfig(func(sc *serviceConfig) { sc.RenewPoll = time.Millisecond })
	a := newTestEnv(t, withRenewer(instancePoll), fast)
	b := newTestEnv(t, beside(a), withRenewer(instancePoll), fast)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := t.Context()
			svc := []*services{a.Svc, b.Svc}[g%2]
			for i := range 15 {
				name := fmt.Sprintf("ka-hammer-%d", (g+i)%4)
				l, err := svc.Acquire(ctx, name, locks.AcquireRequest{TTL: time.Second, Keepalive: true})
				if err != nil {
					continue // held by another goroutine
				}
				time.Sleep(time.Duration(rand.IntN(700)) * time.Millisecond) // often renewed (due every 333ms) meanwhile
				if rand.IntN(2) == 0 {
					_, _ = svc.Renew(ctx, name, l.Token, 0)
				}
				if _, err := svc.Release(ctx, name, l.Token); err != nil {
					t.Errorf("release %s: %v (a keep-alive lease was lost while held)", name, err)
				}
			}
		}()
	}
	wg.Wait()
	if ks := allKeys(t, a.RDB, locks.KeysOf(a.Prefix, "*").Lock); len(ks) != 0 {
		t.Errorf("lock keys left after every lease was released: %v", ks)
	}
	if n := a.registrySize(t); n != 0 {
		t.Errorf("registry = %d entries after every lease was released, want 0", n)
	}
	if metricValue(t, a, "latchkey_keepalive_renewals_total")+metricValue(t, b, "latchkey_keepalive_renewals_total") == 0 {
		t.Error("no renewal happened: the race was not exercised")
	}
}

// Two instances on one Redis: the lease taken through A outlives A's hard
// death, renewed by B.
func TestKeepaliveSurvivesInstanceCrash(t *testing.T) {
	a := newTestEnv(t, withRenewer(instancePoll))
	b := newTestEnv(t, beside(a), withRenewer(instancePoll))
	tok := a.acquireKeepalive(t, "ka-crash", `{"ttl":"2s","keepalive":true}`)
	a.kill()
	// One renewal every ttl/3: seven are more than two TTLs of A's absence.
	eventually(t, 30*time.Second, "B renews the lease 7 times", func() bool {
		return metricValue(t, b, "latchkey_keepalive_renewals_total") >= 7
	})
	st := b.inspectAs(t, "ka-crash", tok)
	if !st.Held || !st.ownedIs(true) || st.LostReason != "" {
		t.Fatalf("two TTLs after A died: %v, want held and owned", st)
	}
}

// With no instance running, nothing renews: the lease expires after its TTL,
// and the owner learns why once an instance is back.
func TestKeepaliveExpiresWhenNoInstanceRuns(t *testing.T) {
	a := newTestEnv(t, withRenewer(instancePoll))
	a.stopRenewer()
	tok := a.acquireKeepalive(t, "ka-down", `{"ttl":"400ms","keepalive":true}`)
	a.waitFree(t, "ka-down", 2*time.Second)
	b := newTestEnv(t, beside(a), withRenewer(instancePoll))
	// A GET reports the loss at once (the lease is gone, its registry entry
	// is not); b's renewer then finds it, records it and counts it.
	eventually(t, 5*time.Second, "b's renewer counts the expiry", func() bool {
		return metricValue(t, b, `latchkey_keepalive_renewal_failures_total{reason="expired"}`) >= 1
	})
	if got := b.inspectAs(t, "ka-down", tok).LostReason; got != locks.LostExpired {
		t.Errorf("lost_reason = %q, want %q", got, locks.LostExpired)
	}
	if n := b.registrySize(t); n != 0 {
		t.Errorf("the registry still holds %d leases, want the lost one dropped", n)
	}
	if got := metricValue(t, b, `latchkey_keepalive_renewal_failures_total{reason="expired"}`); got != 1 {
		t.Errorf(`renewal failures{reason="expired"} = %v, want 1`, got)
	}
}

// A lease force-released while two renewers renew hundreds of others stays
// released, and its owner learns it was force-released.
func TestKeepaliveForceReleaseDuringRenewalStorm(t *testing.T) {
	fast := withServiceConfig(func(sc *serviceConfig) { sc.RenewPoll = time.Millisecond; sc.RenewBatch = 50 })
	a := newTestEnv(t, withRenewer(instancePoll), fast)
	b := newTestEnv(t, beside(a), withRenewer(instancePoll), fast)
	tokens := map[string]string{}
	for i := range 300 {
		name := fmt.Sprintf("ka-storm-%d", i)
		l, err := a.Svc.Acquire(t.Context(), name, locks.AcquireRequest{TTL: 1500 * time.Millisecond, Keepalive: true})
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = l.Token
	}
	renewals := func() float64 {
		return metricValue(t, a, "latchkey_keepalive_renewals_total") + metricValue(t, b, "latchkey_keepalive_renewals_total")
	}
	// The storm is on: 300 leases renewed every 500ms.
	eventually(t, 20*time.Second, "the leases are being renewed", func() bool { return renewals() >= 300 })
	var forced []string
	for i := 0; i < 300; i += 15 {
		name := fmt.Sprintf("ka-storm-%d", i)
		if r := b.do(t, "DELETE", "/v1/locks/"+name+"?force=true", "", "Authorization", "Bearer "+testAdminKey); r.Status != http.StatusNoContent {
			t.Fatalf("force-release %s = %d %s", name, r.Status, r.Body)
		}
		forced = append(forced, name)
	}
	// Two more renewals of every lease left: every forced one was due meanwhile.
	after := renewals()
	eventually(t, 30*time.Second, "two more rounds of renewals", func() bool {
		return renewals() >= after+2*float64(300-len(forced))
	})
	var gotReasons, wantReasons []string
	for _, name := range forced {
		st := a.inspectAs(t, name, tokens[name])
		if st.Held {
			t.Errorf("%s held again after force-release: %v", name, st)
		}
		r := st.LostReason
		gotReasons = append(gotReasons, r)
		wantReasons = append(wantReasons, "force_released")
	}
	if diff := cmp.Diff(wantReasons, gotReasons); diff != "" {
		t.Errorf("lost reasons of force-released leases (-want +got):\n%s", diff)
	}
	if st := a.inspectAs(t, "ka-storm-1", tokens["ka-storm-1"]); !st.ownedIs(true) {
		t.Errorf("a lease not force-released: %v, want still owned", st)
	}
	if got, want := a.registrySize(t), int64(300-len(forced)); got != want {
		t.Errorf("registry = %d entries, want %d", got, want)
	}
}

// Two instances polling flat out renew a lease once per due time between
// them, never twice.
func TestKeepaliveTwoInstancesRenewOncePerDueTime(t *testing.T) {
	fast := withServiceConfig(func(sc *serviceConfig) { sc.RenewPoll = time.Millisecond })
	a := newTestEnv(t, withRenewer(instancePoll), fast)
	b := newTestEnv(t, beside(a), withRenewer(instancePoll), fast)
	start := time.Now()
	a.acquireKeepalive(t, "ka-once", `{"ttl":"1500ms","keepalive":true}`)
	time.Sleep(4 * time.Second)
	total := metricValue(t, a, "latchkey_keepalive_renewals_total") + metricValue(t, b, "latchkey_keepalive_renewals_total")
	// One renewal per ttl/3 = 500ms at most, plus one in flight at each end.
	if most := float64(time.Since(start)/(500*time.Millisecond)) + 2; total > most || total < 3 {
		t.Errorf("renewals by both instances in %s = %v, want between 5 and %v (one per due time)", time.Since(start), total, most)
	}
}

// A registered lease whose key was overwritten by something else is dropped
// from the registry; it does not stop the renewal of the leases batched
// with it.
func TestKeepaliveForeignKeyDoesNotStopTheBatch(t *testing.T) {
	a := newTestEnv(t, withRenewer(instancePoll))
	a.acquireKeepalive(t, "ka-foreign", `{"ttl":"2s","keepalive":true}`)
	tok := a.acquireKeepalive(t, "ka-neighbour", `{"ttl":"2s","keepalive":true}`)
	if err := a.RDB.Set(t.Context(), a.lockKey("ka-foreign"), "not a lock", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The batch that meets the foreign key drops its entry and renews the
	// neighbour; the next renews the neighbour alone.
	eventually(t, 20*time.Second, "the neighbour is renewed twice", func() bool {
		return metricValue(t, a, "latchkey_keepalive_renewals_total") >= 2
	})
	if st := a.inspectAs(t, "ka-neighbour", tok); !st.ownedIs(true) {
		t.Errorf("neighbour of a foreign key: %v, want still owned", st)
	}
	if n := a.registrySize(t); n != 1 {
		t.Errorf("registry = %d entries, want 1 (the foreign key's entry dropped)", n)
	}
	if got := metricValue(t, a, `latchkey_keepalive_renewal_failures_total{reason="store"}`); got != 0 {
		t.Errorf(`renewal failures{reason="store"} = %v, want 0`, got)
	}
}

// A Redis outage shorter than the TTL costs a keep-alive lease nothing: the
// renewer's calls time out (counted), it never hangs, and it renews again as
// soon as Redis answers.
func TestKeepaliveSurvivesShortRedisOutage(t *testing.T) {
	_, url := startRedisContainer(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries = -1
	opts.ContextTimeoutEnabled = true // as the server sets it: deadlines reach the socket
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	a := newTestEnv(t, withRedisClient(rdb, ""), withRenewer(instancePoll), withServiceConfig(func(sc *serviceConfig) {
		sc.OpTimeout = 300 * time.Millisecond
	}))
	tok := a.acquireKeepalive(t, "ka-outage", `{"ttl":"4s","keepalive":true}`)
	time.Sleep(500 * time.Millisecond)
	if err := rdb.Do(t.Context(), "CLIENT", "PAUSE", 2000, "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	time.Sleep(2500 * time.Millisecond)
	renewals := metricValue(t, a, "latchkey_keepalive_renewals_total")
	time.Sleep(3 * time.Second) // past the TTL of the last renewal before the pause
	if st := a.inspectAs(t, "ka-outage", tok); !st.ownedIs(true) {
		t.Fatalf("after a 2s outage and 3s more: %v, want owned", st)
	}
	if got := metricValue(t, a, "latchkey_keepalive_renewals_total"); got <= renewals {
		t.Errorf("renewals after the outage: %v, then %v; want more", renewals, got)
	}
	if got := metricValue(t, a, `latchkey_keepalive_renewal_failures_total{reason="store"}`); got < 1 {
		t.Errorf(`renewal failures{reason="store"} = %v, want the outage counted`, got)
	}
}
