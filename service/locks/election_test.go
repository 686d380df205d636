package locks_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
)

func mustCampaign(t *testing.T, svc *locks.Service, name string, req locks.AcquireRequest) locks.Lease {
	t.Helper()
	l, err := svc.Campaign(t.Context(), name, req)
	if err != nil {
		t.Fatalf("Campaign(%s) = %v", name, err)
	}
	return l
}

func mustInspectElection(t *testing.T, svc *locks.Service, name, token string) locks.ElectionState {
	t.Helper()
	st, err := svc.InspectElection(t.Context(), name, token)
	if err != nil {
		t.Fatalf("InspectElection(%s) = %v", name, err)
	}
	return st
}

// A campaign on a vacant election is elected: a term, the value and the
// owner are the leader's, and inspection shows them to anyone, with whether
// a token given leads.
func TestCampaignElects(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	l := mustCampaign(t, svc, "primary", locks.AcquireRequest{Value: "10.0.0.7:5432", Owner: "db-1", TTL: 10 * time.Second})
	if l.Fence <= 0 || l.Value != "10.0.0.7:5432" || l.HoldCount != 1 || l.Reentrant || l.TTL != 10*time.Second {
		t.Fatalf("lease = %+v, want a new term with the value, one hold, the TTL", l)
	}
	st := mustInspectElection(t, svc, "primary", "")
	if st.Leader == nil {
		t.Fatal("no leader after an elected campaign")
	}
	want := locks.Leader{Value: "10.0.0.7:5432", Term: l.Fence, Owner: "db-1", Since: t0, TTL: 10 * time.Second, ExpiresAt: t0.Add(10 * time.Second)}
	if *st.Leader != want {
		t.Errorf("leader = %+v, want %+v", *st.Leader, want)
	}
	if st.Owned || st.Term != l.Fence {
		t.Errorf("state without a token: owned %v, term %d; want false, %d", st.Owned, st.Term, l.Fence)
	}
	if !mustInspectElection(t, svc, "primary", l.Token).Owned {
		t.Error("the leader's token is not reported leading")
	}
	if mustInspectElection(t, svc, "primary", tokenB).Owned {
		t.Error("another token is reported leading")
	}
}

// A campaign while another token leads answers the leader's public state
// and when its lease ends; the leader campaigning again keeps its term and
// proclaims its new value.
func TestCampaignWhileLed(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	l := mustCampaign(t, svc, "primary", locks.AcquireRequest{Value: "a", Owner: "one", TTL: 7 * time.Second})
	_, err := svc.Campaign(t.Context(), "primary", locks.AcquireRequest{Value: "b"})
	var held *locks.ElectionHeldError
	if !errors.As(err, &held) || !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second campaign = %v, want an *ElectionHeldError wrapping ErrConflict", err)
	}
	if held.RetryAfter != 7*time.Second || held.Leader == nil || held.Leader.Value != "a" || held.Leader.Term != l.Fence || held.Leader.Owner != "one" {
		t.Errorf("refusal = %+v leader %+v, want retry 7s and the leader a, term %d, owner one", held, held.Leader, l.Fence)
	}
	again := mustCampaign(t, svc, "primary", locks.AcquireRequest{Token: l.Token, Value: "a2"})
	if !again.Reentrant || again.Fence != l.Fence || again.HoldCount != 1 || again.TTL != 7*time.Second {
		t.Errorf("re-campaign = %+v, want reentrant, term %d, one hold, its own TTL", again, l.Fence)
	}
	if v := mustInspectElection(t, svc, "primary", "").Leader.Value; v != "a2" {
		t.Errorf("value after re-campaign = %q, want a2", v)
	}
}

// waitCandidates waits until the election has n candidates waiting.
func waitCandidates(t *testing.T, svc *locks.Service, name string, n int64) {
	t.Helper()
	end := time.Now().Add(time.Minute) // a hang guard
	for mustInspectElection(t, svc, name, "").Candidates != n {
		if time.Now().After(end) {
			t.Fatalf("candidates never reached %d", n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Waiting candidates are elected in the order they came, each resignation
// electing the next, and each term is above the one before.
func TestCampaignWaitsInArrivalOrder(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	t.Cleanup(func() { _ = svc.Close() })
	first := mustCampaign(t, svc, "primary", locks.AcquireRequest{Value: "first"})
	type won struct {
		value string
		lease locks.Lease
		err   error
	}
	wins := make(chan won, 3)
	for i, v := range []string{"a", "b", "c"} {
		go func() {
			l, err := svc.Campaign(t.Context(), "primary", locks.AcquireRequest{Value: v, Wait: time.Minute})
			wins <- won{v, l, err}
		}()
		waitCandidates(t, svc, "primary", int64(i+1))
	}
	term, token := first.Fence, first.Token
	for _, want := range []string{"a", "b", "c"} {
		if _, err := svc.Resign(t.Context(), "primary", token); err != nil {
			t.Fatalf("Resign = %v", err)
		}
		var w won
		select {
		case w = <-wins:
		case <-time.After(time.Minute): // a hang guard
			t.Fatalf("no candidate elected after a resignation (want %s)", want)
		}
		if w.err != nil || w.value != want {
			t.Fatalf("elected %q (%v), want %q: arrival order", w.value, w.err, want)
		}
		if w.lease.Fence <= term {
			t.Errorf("term of %s = %d, want above %d", want, w.lease.Fence, term)
		}
		term, token = w.lease.Fence, w.lease.Token
	}
}

// Proclaim changes the value and keeps the term and the lease; only the
// leader may, and not after it resigned.
func TestProclaim(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	l := mustCampaign(t, svc, "primary", locks.AcquireRequest{Value: "old", TTL: 5 * time.Second})
	p, err := svc.Proclaim(t.Context(), "primary", l.Token, "new")
	if err != nil {
		t.Fatalf("Proclaim = %v", err)
	}
	if p.Fence != l.Fence || p.Value != "new" || p.TTL != 5*time.Second {
		t.Errorf("proclaimed = %+v, want term %d, value new, TTL 5s", p, l.Fence)
	}
	if st := mustInspectElection(t, svc, "primary", ""); st.Leader.Value != "new" || st.Leader.Term != l.Fence {
		t.Errorf("leader = %+v, want new at term %d", st.Leader, l.Fence)
	}
	if _, err := svc.Proclaim(t.Context(), "primary", tokenB, "mine"); !errors.Is(err, locks.ErrNotOwner) {
		t.Errorf("Proclaim by another token = %v, want ErrNotOwner", err)
	}
	if _, err := svc.Proclaim(t.Context(), "primary", l.Token, ""); err != nil {
		t.Fatalf("Proclaim of no value = %v", err)
	}
	if v := mustInspectElection(t, svc, "primary", "").Leader.Value; v != "" {
		t.Errorf("value = %q, want none", v)
	}
	if _, err := svc.Resign(t.Context(), "primary", l.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Proclaim(t.Context(), "primary", l.Token, "late"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Proclaim after resigning = %v, want ErrNotFound", err)
	}
}

// Resign leaves the election vacant with its last term known; a second
// resignation, or another token's, is refused.
func TestResign(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	l := mustCampaign(t, svc, "primary", locks.AcquireRequest{})
	if _, err := svc.Resign(t.Context(), "primary", tokenB); !errors.Is(err, locks.ErrNotOwner) {
		t.Errorf("Resign by another token = %v, want ErrNotOwner", err)
	}
	rel, err := svc.Resign(t.Context(), "primary", l.Token)
	if err != nil || !rel.Released {
		t.Fatalf("Resign = %+v, %v", rel, err)
	}
	st := mustInspectElection(t, svc, "primary", "")
	if st.Leader != nil || st.Term != l.Fence {
		t.Errorf("after resigning: leader %+v, term %d; want vacant, term %d", st.Leader, st.Term, l.Fence)
	}
	if _, err := svc.Resign(t.Context(), "primary", l.Token); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second Resign = %v, want ErrNotFound", err)
	}
}

// A renewal extends the leader's lease and keeps its term; another token's
// is refused; a lease that ran out is gone.
func TestRenewElection(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	l := mustCampaign(t, svc, "primary", locks.AcquireRequest{TTL: time.Second})
	r, err := svc.RenewElection(t.Context(), "primary", l.Token, 3*time.Second)
	if err != nil || r.Fence != l.Fence || r.TTL != 3*time.Second {
		t.Fatalf("RenewElection = %+v, %v; want term %d, TTL 3s", r, err, l.Fence)
	}
	if _, err := svc.RenewElection(t.Context(), "primary", tokenB, 0); !errors.Is(err, locks.ErrNotOwner) {
		t.Errorf("renew by another token = %v, want ErrNotOwner", err)
	}
	m.FastForward(4 * time.Second)
	if _, err := svc.RenewElection(t.Context(), "primary", l.Token, 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("renew after the lease ran out = %v, want ErrNotFound", err)
	}
}

// A force-release removes the leader, bumps the term counter so the next
// term is above the evicted one, and tells the evicted keep-alive leader
// why it lost the leadership.
func TestForceResign(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	l := mustCampaign(t, svc, "primary", locks.AcquireRequest{Keepalive: true})
	removed, err := svc.ForceResign(t.Context(), "primary")
	if err != nil || !removed {
		t.Fatalf("ForceResign = %v, %v; want a leader removed", removed, err)
	}
	st := mustInspectElection(t, svc, "primary", l.Token)
	if st.Leader != nil || st.Term <= l.Fence || st.LostReason != locks.LostForceReleased {
		t.Errorf("after force: %+v; want vacant, the counter above %d, lost force_released", st, l.Fence)
	}
	if removed, err := svc.ForceResign(t.Context(), "primary"); err != nil || removed {
		t.Errorf("ForceResign of a vacant election = %v, %v; want nothing removed", removed, err)
	}
	next := mustCampaign(t, svc, "primary", locks.AcquireRequest{})
	if next.Fence <= st.Term {
		t.Errorf("next term = %d, want above the bumped counter %d", next.Fence, st.Term)
	}
}

// Terms stay above every earlier one also when Redis lost the counter.
func TestTermSurvivesDataLoss(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	l := mustCampaign(t, svc, "primary", locks.AcquireRequest{})
	m.FlushAll()
	m.SetTime(t0.Add(time.Millisecond))
	next := mustCampaign(t, svc, "primary", locks.AcquireRequest{})
	if next.Fence <= l.Fence {
		t.Errorf("term after data loss = %d, want above %d", next.Fence, l.Fence)
	}
}

// A keep-alive leadership is renewed by the renewer as a lock's lease is,
// and one past its max hold is lost and recorded so.
func TestElectionKeepalive(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	now := t0
	l := mustCampaign(t, svc, "primary", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true, MaxHold: 20 * time.Second})
	for range 12 { // 12s: four TTLs
		advance(m, &now, time.Second)
		locks.RenewDueNow(t.Context(), svc)
		if st := mustInspectElection(t, svc, "primary", l.Token); !st.Owned {
			t.Fatalf("t0+%s: leadership lost (%q) while kept alive", now.Sub(t0), st.LostReason)
		}
	}
	for now.Sub(t0) < 25*time.Second {
		advance(m, &now, time.Second)
		locks.RenewDueNow(t.Context(), svc)
	}
	st := mustInspectElection(t, svc, "primary", l.Token)
	if st.Leader != nil || st.LostReason != "max_hold" {
		t.Errorf("past max hold: leader %+v, lost %q; want vacant, max_hold", st.Leader, st.LostReason)
	}
	page, err := svc.ListLost(t.Context(), "election", locks.ListRequest{})
	if err != nil || len(page.Items) != 1 || page.Items[0].Leases[0].Reason != "max_hold" || page.Items[0].Leases[0].Fence != l.Fence {
		t.Errorf("lost elections = %+v, %v; want primary lost to max_hold at term %d", page.Items, err, l.Fence)
	}
}

// Refused requests change nothing in Redis: bad input is refused before any
// command, and a refusal by the scripts (led by another, not the leader)
// leaves every key as it was.
func TestElectionRefusalsChangeNothing(t *testing.T) {
	svc, m := newTestService(t, locks.Config{})
	ctx := t.Context()
	big := strings.Repeat("x", locks.MaxValueBytes+1)
	before := m.CommandCount()
	for _, tc := range []struct {
		desc        string
		err         error
		field, rule string
	}{
		{"campaign bad name", func() error { _, err := svc.Campaign(ctx, "{x}", locks.AcquireRequest{}); return err }(), "name", "format"},
		{"campaign value too long", func() error { _, err := svc.Campaign(ctx, "primary", locks.AcquireRequest{Value: big}); return err }(), "value", "max"},
		{"campaign value not UTF-8", func() error { _, err := svc.Campaign(ctx, "primary", locks.AcquireRequest{Value: "\xff"}); return err }(), "value", "utf8"},
		{"campaign bad owner", func() error {
			_, err := svc.Campaign(ctx, "primary", locks.AcquireRequest{Owner: "\x00"})
			return err
		}(), "owner", "printable"},
		{"proclaim value too long", func() error { _, err := svc.Proclaim(ctx, "primary", tokenA, big); return err }(), "value", "max"},
		{"proclaim without token", func() error { _, err := svc.Proclaim(ctx, "primary", "", "v"); return err }(), "Lock-Token", "format"},
		{"resign bad token", func() error { _, err := svc.Resign(ctx, "primary", "short"); return err }(), "Lock-Token", "format"},
	} {
		t.Run(tc.desc, func(t *testing.T) { wantValidation(t, tc.err, tc.field, tc.rule) })
	}
	if got := m.CommandCount(); got != before {
		t.Errorf("invalid requests sent %d commands to Redis, want 0", got-before)
	}

	l := mustCampaign(t, svc, "primary", locks.AcquireRequest{Value: "v", Keepalive: true})
	dump := m.Dump()
	if _, err := svc.Campaign(ctx, "primary", locks.AcquireRequest{Value: "w"}); err == nil {
		t.Fatal("campaign while led was elected")
	}
	if _, err := svc.Proclaim(ctx, "primary", tokenB, "w"); !errors.Is(err, locks.ErrNotOwner) {
		t.Fatalf("proclaim by another = %v", err)
	}
	if _, err := svc.Resign(ctx, "primary", tokenB); !errors.Is(err, locks.ErrNotOwner) {
		t.Fatalf("resign by another = %v", err)
	}
	if _, err := svc.RenewElection(ctx, "primary", tokenB, 0); !errors.Is(err, locks.ErrNotOwner) {
		t.Fatalf("renew by another = %v", err)
	}
	if got := m.Dump(); got != dump {
		t.Errorf("refused requests changed Redis:\nbefore:\n%s\nafter:\n%s", dump, got)
	}
	_ = l
}

// The scripts publish on the election's channel, in its hash slot: a grant
// "acquired:<term>:<ttl_ms>", a proclamation "proclaimed:<term>", a
// resignation "released" and a force-release "forced".
func TestElectionWakeUps(t *testing.T) {
	_, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, locks.Config{})
	sub := subscribeAll(t, rdb)
	a := mustCampaign(t, svc, "primary", locks.AcquireRequest{TTL: 9 * time.Second})
	if _, err := svc.Proclaim(t.Context(), "primary", a.Token, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Resign(t.Context(), "primary", a.Token); err != nil {
		t.Fatal(err)
	}
	b := mustCampaign(t, svc, "primary", locks.AcquireRequest{TTL: 9 * time.Second})
	if _, err := svc.ForceResign(t.Context(), "primary"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Publish(t.Context(), "end-of-test", "end").Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		msg, err := sub.ReceiveMessage(ctx)
		cancel()
		if err != nil {
			t.Fatalf("after %v: %v", got, err)
		}
		if msg.Channel == "end-of-test" {
			break
		}
		if msg.Channel != locks.ElectionKeysOf(locks.KeyPrefix(svc), "primary").Channel {
			t.Errorf("message on %q, want the election's channel", msg.Channel)
		}
		got = append(got, msg.Payload)
	}
	want := []string{
		"acquired:" + strconv.FormatInt(a.Fence, 10) + ":9000", "proclaimed:" + strconv.FormatInt(a.Fence, 10), "released",
		"acquired:" + strconv.FormatInt(b.Fence, 10) + ":9000", "forced",
	}
	if !slices.Equal(got, want) {
		t.Errorf("messages = %q, want %q", got, want)
	}
}

// An election and a lock of the same name are apart: their keys differ
// and each is held on its own.
func TestElectionIsApartFromTheLock(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	mustAcquire(t, svc, "primary", locks.AcquireRequest{})
	mustCampaign(t, svc, "primary", locks.AcquireRequest{})
	if ek, lk := locks.ElectionKeysOf("p:", "x"), locks.KeysOf("p:", "x"); ek.Lock == lk.Lock || !strings.HasSuffix(ek.Lock, "{x}") {
		t.Errorf("election key %q, lock key %q: want apart, under the name's hash tag", ek.Lock, lk.Lock)
	}
}

// The election's metrics count its grants, refusals, waits and ends, and
// nothing of it is counted as a lock's.
func TestElectionMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc, _ := newTestService(t, locks.Config{Registerer: reg})
	mustCampaign(t, svc, "primary", locks.AcquireRequest{Token: tokenA})
	mustCampaign(t, svc, "primary", locks.AcquireRequest{Token: tokenA})
	if _, err := svc.Campaign(t.Context(), "primary", locks.AcquireRequest{Token: tokenB, Wait: 20 * time.Millisecond}); err == nil {
		t.Fatal("a second token was elected while another led")
	}
	if _, err := svc.Resign(t.Context(), "primary", tokenA); err != nil {
		t.Fatal(err)
	}
	mustCampaign(t, svc, "primary", locks.AcquireRequest{Token: tokenB})
	if _, err := svc.ForceResign(t.Context(), "primary"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"latchkey_election_grants_total", []string{"kind", "new"}, 2},
		{"latchkey_election_grants_total", []string{"kind", "reentrant"}, 1},
		{"latchkey_election_conflicts_total", nil, 1},
		{"latchkey_election_waits_total", []string{"outcome", "timeout"}, 1},
		{"latchkey_election_releases_total", []string{"kind", "resigned"}, 1},
		{"latchkey_election_releases_total", []string{"kind", "forced"}, 1},
		{"latchkey_lock_grants_total", []string{"kind", "new"}, 0},
	} {
		if got := storetest.CounterValue(t, reg, tt.name, tt.labels...); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

// A candidate that gives up leaves the queue at once: the one behind it is
// elected on the next resignation, not after the first one's deadline.
func TestAbandonedCandidateLeavesTheQueue(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	t.Cleanup(func() { _ = svc.Close() })
	leader := mustCampaign(t, svc, "primary", locks.AcquireRequest{})
	ctx, cancel := context.WithCancel(t.Context())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := svc.Campaign(ctx, "primary", locks.AcquireRequest{Value: "quitter", Wait: time.Minute})
		gaveUp <- err
	}()
	waitCandidates(t, svc, "primary", 1)
	elected := make(chan locks.Lease, 1)
	go func() {
		l, err := svc.Campaign(t.Context(), "primary", locks.AcquireRequest{Value: "stayer", Wait: time.Minute})
		if err != nil {
			t.Errorf("the second candidate = %v", err)
		}
		elected <- l
	}()
	waitCandidates(t, svc, "primary", 2)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the candidate that gave up = %v, want context.Canceled", err)
	}
	waitCandidates(t, svc, "primary", 1)
	if _, err := svc.Resign(t.Context(), "primary", leader.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-elected:
		if l.Value != "stayer" {
			t.Errorf("elected %q, want stayer", l.Value)
		}
	case <-time.After(time.Minute): // a hang guard: the candidate's wait is a minute too
		t.Fatal("the candidate behind one that gave up was not elected")
	}
}

// A held leadership carries the value, and closing the hold resigns.
func TestHoldElection(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	t.Cleanup(func() { _ = svc.Close() })
	h, err := svc.HoldElection(t.Context(), "primary", locks.AcquireRequest{Value: "held", TTL: 3 * time.Second})
	if err != nil {
		t.Fatalf("HoldElection = %v", err)
	}
	if l := h.Lease(); l.Value != "held" || l.Fence <= 0 {
		t.Errorf("held lease = %+v, want the value and a term", l)
	}
	if st := mustInspectElection(t, svc, "primary", h.Lease().Token); !st.Owned || st.Leader.Value != "held" {
		t.Errorf("while held: %+v, want led with the value", st)
	}
	if rel, err := h.Close(t.Context()); err != nil || !rel.Released {
		t.Fatalf("Close = %+v, %v; want resigned", rel, err)
	}
	if st := mustInspectElection(t, svc, "primary", ""); st.Leader != nil {
		t.Errorf("after the hold closed: leader %+v, want vacant", st.Leader)
	}
}
