package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/client"
)

// A campaign on a vacant election leads with its value and a term; another
// candidate is refused with the leader's public state, waits in line, and
// is elected with a greater term once the leader resigns; the leader's
// Status and Leader say who leads, nil once it is vacant.
func TestElectionCampaign(t *testing.T) {
	ctx := t.Context()
	el := testClient(t).Election("db-primary")
	if l, err := el.Leader(ctx); err != nil || l != nil {
		t.Fatalf("Leader of a new election = %+v (err %v), want nil", l, err)
	}
	a := mustLease(t)(el.TryCampaign(ctx, "10.0.0.7:5432", client.CampaignOptions{TTL: time.Minute, Owner: "db-1"}))
	if a.Fence <= 0 || a.Name != "db-primary" {
		t.Fatalf("leadership %s term %d, want db-primary with a term above 0", a.Name, a.Fence)
	}
	_, err := el.TryCampaign(ctx, "10.0.0.8:5432", client.CampaignOptions{})
	var held *client.HeldError
	if !errors.As(err, &held) || !errors.Is(err, client.ErrHeld) {
		t.Fatalf("TryCampaign while another leads: err = %v, want a *HeldError", err)
	}
	if held.Leader == nil || held.Leader.Value != "10.0.0.7:5432" || held.Leader.Term != a.Fence ||
		held.Leader.Owner != "db-1" || held.Leader.TTL <= 0 || held.Leader.Since.IsZero() {
		t.Fatalf("HeldError.Leader = %+v, want the leader's value, term %d, owner, TTL and since", held.Leader, a.Fence)
	}

	waiter := goAcquire(func() (*client.Lease, error) {
		return el.Campaign(ctx, "10.0.0.8:5432", client.CampaignOptions{TTL: time.Minute, Wait: time.Minute})
	})
	eventually(t, "the second candidate waits", func() bool {
		st, err := el.Status(ctx)
		return err == nil && st.Candidates == 1
	})
	st, err := el.Status(ctx)
	if err != nil || st.Leader == nil || st.Leader.Term != a.Fence || st.Term != a.Fence {
		t.Fatalf("Status = %+v (err %v), want the first leader at term %d", st, err, a.Fence)
	}
	wantPending(t, waiter, "while the first leader has not resigned")
	if err := el.Resign(ctx, a); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(a.Err(), client.ErrReleased) {
		t.Fatalf("Err after Resign = %v, want ErrReleased", a.Err())
	}
	b := wantGranted(t, waiter)
	if b.Fence <= a.Fence {
		t.Fatalf("the next leader's term %d, want above %d", b.Fence, a.Fence)
	}
	if l, err := el.Leader(ctx); err != nil || l == nil || l.Value != "10.0.0.8:5432" || l.Term != b.Fence {
		t.Fatalf("Leader = %+v (err %v), want 10.0.0.8:5432 at term %d", l, err, b.Fence)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := el.Leader(ctx); err != nil || l != nil {
		t.Fatalf("Leader once vacant = %+v (err %v), want nil", l, err)
	}
}

// Proclaim changes the leader's value, keeping the term; a leadership that
// has ended cannot proclaim, and the one removed by force ends with
// ErrNotOwner or ErrLeaseNotFound.
func TestElectionProclaim(t *testing.T) {
	ctx := t.Context()
	el := testClient(t, client.WithAPIKey(exampleAdminKey)).Election("proclaim")
	l := mustLease(t)(el.TryCampaign(ctx, "v1", client.CampaignOptions{TTL: time.Minute}))
	if err := el.Proclaim(ctx, l, "v2"); err != nil {
		t.Fatal(err)
	}
	if got, err := el.Leader(ctx); err != nil || got == nil || got.Value != "v2" || got.Term != l.Fence {
		t.Fatalf("Leader after Proclaim = %+v (err %v), want v2 at term %d", got, err, l.Fence)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := el.Proclaim(ctx, l, "v3"); !errors.Is(err, client.ErrReleased) {
		t.Fatalf("Proclaim after Unlock: err = %v, want ErrReleased", err)
	}

	// Removed by an administrator, the leader can no longer proclaim and
	// learns why.
	m := mustLease(t)(el.TryCampaign(ctx, "m", client.CampaignOptions{TTL: time.Minute}))
	if err := el.ForceRelease(ctx); err != nil {
		t.Fatal(err)
	}
	err := el.Proclaim(ctx, m, "m2")
	if !errors.Is(err, client.ErrLeaseNotFound) && !errors.Is(err, client.ErrNotOwner) {
		t.Fatalf("Proclaim by a removed leader: err = %v, want ErrLeaseNotFound or ErrNotOwner", err)
	}
	var lost *client.LostError
	if !errors.As(m.Err(), &lost) || lost.Reason != client.ReasonForceReleased {
		t.Fatalf("Err = %v, want lost with %s", m.Err(), client.ReasonForceReleased)
	}
	if got, err := el.Leader(ctx); err != nil || got != nil {
		t.Fatalf("Leader after the removal = %+v (err %v), want nil", got, err)
	}
}

// Lead holds the leadership over a stream: a candidate behind it waits, is
// elected with a greater term as soon as the stream closes (Unlock), and the
// leader removed by force learns it from its stream.
func TestElectionLead(t *testing.T) {
	ctx := t.Context()
	el := testClient(t, client.WithAPIKey(exampleAdminKey)).Election("lead")
	a := mustLease(t)(el.Lead(ctx, "a", client.HoldOptions{TTL: time.Minute, Wait: -1, Fair: true}))
	if got, err := el.Leader(ctx); err != nil || got == nil || got.Value != "a" || got.Term != a.Fence {
		t.Fatalf("Leader = %+v (err %v), want a at term %d", got, err, a.Fence)
	}
	waiter := goAcquire(func() (*client.Lease, error) {
		return el.Lead(ctx, "b", client.HoldOptions{TTL: time.Minute, Wait: time.Minute})
	})
	eventually(t, "the second candidate waits", func() bool {
		st, err := el.Status(ctx)
		return err == nil && st.Candidates == 1
	})
	wantPending(t, waiter, "while a leads")
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	b := wantGranted(t, waiter)
	if b.Fence <= a.Fence {
		t.Fatalf("term %d after %d, want greater", b.Fence, a.Fence)
	}
	if err := el.ForceRelease(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the held leadership never learnt it was removed")
	}
	var lost *client.LostError
	if !errors.As(b.Err(), &lost) || lost.Reason != client.ReasonForceReleased || lost.Fence != b.Fence {
		t.Fatalf("Err = %v, want lost with %s at term %d", b.Err(), client.ReasonForceReleased, b.Fence)
	}
}

// Observe sends the leader at once and on every change: elected with a new
// term, proclaimed in the same term (each with when the term began, as
// Leader says), and a zero Leader when vacant.
func TestElectionObserve(t *testing.T) {
	ctx := t.Context()
	el := testClient(t).Election("observed")
	leaders := el.Observe(ctx)
	next := func() client.Leader {
		t.Helper()
		select {
		case l, ok := <-leaders:
			if !ok {
				t.Fatal("Observe's channel closed")
			}
			return l
		case <-time.After(time.Minute):
			t.Fatal("no leader from Observe within a minute")
		}
		return client.Leader{}
	}
	if l := next(); l.Term != 0 {
		t.Fatalf("first leader %+v, want vacant", l)
	}
	a := mustLease(t)(el.TryCampaign(ctx, "a", client.CampaignOptions{TTL: time.Minute, Owner: "node-a"}))
	leader, err := el.Leader(ctx)
	if err != nil || leader == nil || leader.Since.IsZero() {
		t.Fatalf("Leader = %+v (err %v), want a's term with when it began", leader, err)
	}
	if l := next(); l.Term != a.Fence || l.Value != "a" || l.Owner != "node-a" || !l.Since.Equal(leader.Since) {
		t.Fatalf("leader %+v, want a (node-a) at term %d, since %s", l, a.Fence, leader.Since)
	}
	if err := el.Proclaim(ctx, a, "a2"); err != nil {
		t.Fatal(err)
	}
	if l := next(); l.Term != a.Fence || l.Value != "a2" || !l.Since.Equal(leader.Since) {
		t.Fatalf("leader %+v, want a2 at term %d, since %s", l, a.Fence, leader.Since)
	}
	if err := el.Resign(ctx, a); err != nil {
		t.Fatal(err)
	}
	if l := next(); l.Term != 0 {
		t.Fatalf("leader %+v after the resignation, want vacant", l)
	}
	b := mustLease(t)(el.TryCampaign(ctx, "b", client.CampaignOptions{TTL: time.Minute}))
	if l := next(); l.Term != b.Fence || l.Term <= a.Fence || l.Value != "b" {
		t.Fatalf("leader %+v, want b at term %d, above %d", l, b.Fence, a.Fence)
	}
}

// Observe of an election the server will not watch (a bad name) sends one
// Leader with Err saying why, and closes its channel.
func TestElectionObserveRefused(t *testing.T) {
	leaders := testClient(t).Election("bad{name}").Observe(t.Context())
	var got []client.Leader
	timeout := time.After(time.Minute) // a hang guard
	for open := true; open; {
		select {
		case l, ok := <-leaders:
			if open = ok; ok {
				got = append(got, l)
			}
		case <-timeout:
			t.Fatalf("Observe's channel still open a minute after a refusal; got %+v", got)
		}
	}
	var bad *client.InvalidRequestError
	if len(got) != 1 || !errors.As(got[0].Err, &bad) || got[0].Term != 0 {
		t.Fatalf("Observe of a bad name sent %+v, want one Leader whose Err is an *InvalidRequestError", got)
	}
}
