package integration

import (
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/client"
)

// wantLeader fails the test unless el is led with value at term.
func wantLeader(t *testing.T, el *client.Election, value string, term int64) {
	t.Helper()
	l, err := el.Leader(t.Context())
	if err != nil || l == nil || l.Value != value || l.Term != term {
		t.Fatalf("Leader = %+v (err %v), want %q at term %d", l, err, value, term)
	}
}

// TestClientElection: the client's elections against the server on Redis.
// A keep-alive leadership lives past its first validity on the client's
// heartbeats; another candidate is refused with the leader's public state;
// Proclaim changes the value under the same term; a candidate waiting on
// another instance is elected with a greater term when the leader resigns.
// A leadership held over a stream ends connection_lost when its instance
// dies, and the candidate waiting on the other instance is elected with a
// greater term.
func TestClientElection(t *testing.T) {
	a := newClientEnv(t)
	b := newClientEnv(t, beside(a.testEnv))
	ctx := t.Context()
	elA, elB := a.c.Election("db-primary"), b.c.Election("db-primary")

	lead, err := elA.Campaign(ctx, "10.0.0.7:5432", client.CampaignOptions{TTL: 3 * time.Second, KeepAlive: true,
		Heartbeat: 3 * time.Second, MaxHold: time.Minute, Owner: "db-1"})
	if err != nil {
		t.Fatal(err)
	}
	keptPast(t, lead, 3, lead.ValidUntil())
	_, err = elB.TryCampaign(ctx, "10.0.0.8:5432", client.CampaignOptions{})
	var held *client.HeldError
	if !errors.As(err, &held) || !errors.Is(err, client.ErrHeld) || held.Leader == nil ||
		held.Leader.Value != "10.0.0.7:5432" || held.Leader.Term != lead.Fence || held.Leader.Owner != "db-1" || held.RetryAfter <= 0 {
		t.Fatalf("TryCampaign while db-1 leads: err = %v (leader %+v), want a *HeldError with db-1's state and a Retry-After", err, held)
	}
	if err := elA.Proclaim(ctx, lead, "10.0.0.9:5432"); err != nil {
		t.Fatal(err)
	}
	wantLeader(t, elB, "10.0.0.9:5432", lead.Fence)

	waiter := make(chan *client.Lease, 1)
	go func() {
		l, err := elB.Campaign(ctx, "10.0.0.8:5432", client.CampaignOptions{TTL: time.Minute, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		waiter <- l
	}()
	eventually(t, doneGuard, "the second candidate waits", func() bool {
		st, err := elA.Status(ctx)
		return err == nil && st.Candidates == 1
	})
	if err := elA.Resign(ctx, lead); err != nil {
		t.Fatal(err)
	}
	var next *client.Lease
	select {
	case next = <-waiter:
	case <-time.After(doneGuard):
		t.Fatal("the waiting candidate was never elected")
	}
	if next == nil || next.Fence <= lead.Fence {
		t.Fatalf("the next leader %+v, want a term above %d", next, lead.Fence)
	}
	wantLeader(t, elA, "10.0.0.8:5432", next.Fence)
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Over streams: the leader's instance dies.
	x := newClientEnv(t, beside(a.testEnv))
	elX := x.c.Election("streamed")
	first, err := elX.Lead(ctx, "x", client.HoldOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	follower := make(chan *client.Lease, 1)
	go func() {
		l, err := a.c.Election("streamed").Lead(ctx, "a", client.HoldOptions{TTL: time.Minute, Wait: time.Minute})
		if err != nil {
			t.Error(err)
		}
		follower <- l
	}()
	eventually(t, doneGuard, "the streamed candidate waits", func() bool {
		st, err := a.c.Election("streamed").Status(ctx)
		return err == nil && st.Candidates == 1
	})
	x.kill()
	wantLost(t, waitDone(t, first, "leadership on a dead instance"), client.ReasonConnectionLost)
	var second *client.Lease
	select {
	case second = <-follower:
	case <-time.After(doneGuard):
		t.Fatal("the streamed candidate was never elected")
	}
	if second == nil || second.Fence <= first.Fence {
		t.Fatalf("the follower %+v, want a term above %d", second, first.Fence)
	}
	wantLeader(t, a.c.Election("streamed"), "a", second.Fence)
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := a.c.Election("streamed").Leader(ctx); err != nil || l != nil {
		t.Fatalf("Leader after the follower resigned = %+v (err %v), want vacant", l, err)
	}
}

// TestClientElectionUnknownOutcome: a campaign the server granted but
// answered 503 is sent again with the same token and re-enters the same
// term, so one resignation leaves the election vacant; a campaign answered
// 503 every time leaves no leader behind.
func TestClientElectionUnknownOutcome(t *testing.T) {
	e := newClientEnv(t)
	ctx := t.Context()
	f, url := newFlakyProxy(t, e.URL)
	el := mustClient(t, url, fastRetry).Election("flaky")
	direct := e.c.Election("flaky")

	f.fail.Store(1)
	l, err := el.Campaign(ctx, "v", client.CampaignOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if f.seen.Load() != 2 {
		t.Fatalf("campaigns sent = %d, want 2 (one retry)", f.seen.Load())
	}
	wantLeader(t, direct, "v", l.Fence)
	if err := el.Resign(ctx, l); err != nil {
		t.Fatal(err)
	}
	if got, err := direct.Leader(ctx); err != nil || got != nil {
		t.Fatalf("Leader after one resignation = %+v (err %v), want vacant", got, err)
	}

	f.fail.Store(-1)
	if _, err := el.Campaign(ctx, "w", client.CampaignOptions{TTL: time.Minute}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Campaign through a proxy answering 503: %v, want ErrUnavailable", err)
	}
	f.fail.Store(0)
	st, err := direct.Status(ctx)
	if err != nil || st.Leader != nil || st.Term <= l.Fence {
		t.Fatalf("Status after the failed campaign = %+v (err %v), want vacant with a term above %d issued", st, err, l.Fence)
	}
}
