package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// Election is a leader election of the server: at most one candidate leads
// it at a time, with a value (an address, a node name) that anyone may read
// and a term that is strictly greater than every earlier term of the name.
// A leadership is a lease like a lock's: its Fence is the term, Renew
// extends it, Unlock resigns, and it is lost as a lock's lease is.
// Candidates waiting for the leadership are elected in arrival order. Its
// names are a namespace of their own, apart from locks, read/write locks
// and semaphores. An Election is safe for concurrent use.
type Election struct {
	c    *Client
	name string
}

// Election returns the election name. It sends no request.
func (c *Client) Election(name string) *Election { return &Election{c: c, name: name} }

func (e *Election) target(value string) target {
	return target{kind: kindElection, name: e.name, value: value}
}

// CampaignOptions tunes a campaign. Zero values take the server's defaults.
// An election is always fair: candidates wait in arrival order.
type CampaignOptions struct {
	// TTL is the leadership's time to live (server default 30s).
	TTL time.Duration
	// Wait bounds how long Campaign waits for the leadership; zero waits
	// until ctx is done, a negative Wait does not wait.
	Wait time.Duration
	// KeepAlive, MaxHold and Heartbeat keep the leadership alive as
	// LockOptions' do for a lock's lease.
	KeepAlive bool
	MaxHold   time.Duration
	Heartbeat time.Duration
	// Owner describes the leader, as LockOptions.Owner.
	Owner string
}

func (o CampaignOptions) lockOptions() LockOptions {
	return LockOptions{TTL: o.TTL, Wait: o.Wait, KeepAlive: o.KeepAlive, MaxHold: o.MaxHold,
		Heartbeat: o.Heartbeat, Owner: o.Owner}
}

// Campaign asks for the leadership with value as the leader's value,
// waiting up to opts.Wait (zero: until ctx is done) in arrival order behind
// the candidates that came first, woken by the server as soon as the leader
// resigns or its lease ends. The *Lease returned is the leadership: its
// Fence is the term (pass it to whatever the leader writes to, as a lock's
// fence), Unlock (or Resign) resigns, and with opts.KeepAlive it is kept
// alive as Client.Lock keeps a lease. An acquire whose outcome is unknown is
// settled as Client.Lock settles it.
//
// Returns a *HeldError (errors.Is(err, ErrHeld)) carrying the leader's
// public state when another candidate still leads when the wait ends, an
// *InvalidRequestError for a bad name, value or option, ErrUnavailable
// (wrapped) when the server could not answer, and the context's error when
// ctx ends first.
func (e *Election) Campaign(ctx context.Context, value string, opts CampaignOptions) (*Lease, error) {
	return e.c.lock(ctx, e.target(value), NewToken(), opts.lockOptions())
}

// TryCampaign takes the leadership if the election is vacant, without
// waiting. Returns the errors of Campaign.
func (e *Election) TryCampaign(ctx context.Context, value string, opts CampaignOptions) (*Lease, error) {
	opts.Wait = -1
	return e.Campaign(ctx, value, opts)
}

// Lead campaigns with value and leads for as long as the connection that
// asked stays open, as Client.Hold holds a lock: the server renews the
// leadership every TTL/3 while it is open and the leader resigns as soon as
// it closes, so a crashed process is no longer leader once its connection
// ends. opts.Fair is ignored (an election is always fair). Unlock resigns
// and closes the connection. ctx bounds the campaign only. Returns the
// errors of Campaign.
func (e *Election) Lead(ctx context.Context, value string, opts HoldOptions) (*Lease, error) {
	opts.Fair = false
	return e.c.hold(ctx, e.target(value), opts)
}

// Proclaim sets the value of the leadership l without giving it up: the
// term and the lease stay as they are. Returns ErrLeaseNotFound or
// ErrNotOwner (and ends l, Err saying why) when l no longer leads, l's Err
// when it already ended, an *InvalidRequestError for a bad value, and
// ErrUnavailable (wrapped) when the server could not answer.
func (e *Election) Proclaim(ctx context.Context, l *Lease, value string) error {
	if err := l.Err(); err != nil {
		return err
	}
	req := request{method: http.MethodPut, path: e.target("").path() + "/value",
		body: map[string]string{"value": value}, token: l.Token}
	resp, err := e.c.do(ctx, req, true) // the same value again changes nothing
	if err != nil {
		if errors.Is(err, ErrLeaseNotFound) || errors.Is(err, ErrNotOwner) {
			l.lost(e.c.lostReason(ctx, l.t, l.Token), err)
		}
		return err
	}
	var lj leaseJSON
	return decode(req, resp, &lj)
}

// Resign gives up the leadership l: the election is vacant at once and the
// first candidate in line is elected. It is l.Unlock, with its errors.
func (e *Election) Resign(ctx context.Context, l *Lease) error { return l.Unlock(ctx) }

// ForceRelease removes the leader whoever it is (it sees force_released)
// and wakes the candidates. It needs the admin credential as the client's
// API key, and is not retried after a request was sent, as
// Client.ForceRelease. Returns a *Problem with status 403 without the admin
// credential.
func (e *Election) ForceRelease(ctx context.Context) error {
	return e.c.forceRelease(ctx, e.target(""))
}

// Leader is an election's leader as anyone may see it; never its token.
type Leader struct {
	// Value is what the leader proclaimed (empty when none).
	Value string `json:"value"`
	// Term is the leader's term, its lease's fence.
	Term int64 `json:"term"`
	// Owner is the text the leader campaigned with (CampaignOptions.Owner).
	Owner string `json:"owner,omitempty"`
	// Since is when the term began, by the server's store clock.
	Since time.Time `json:"since"`
	// TTL is the leadership's remaining time to live.
	TTL       time.Duration `json:"-"`
	TTLMS     int64         `json:"ttl_ms"`
	ExpiresAt time.Time     `json:"expires_at"`
	// Err is set only on the last Leader Observe sends before it closes its
	// channel because the server refused the watch (the rest is zero).
	Err error `json:"-"`
}

// ElectionState is what the server tells about an election. It never holds
// a token.
type ElectionState struct {
	Name string `json:"name"`
	// Leader is nil when the election is vacant.
	Leader *Leader `json:"leader"`
	// Term is the leader's, or the last term issued when vacant (0 when
	// none is known).
	Term int64 `json:"term"`
	// Candidates is the number of candidates waiting.
	Candidates int64 `json:"candidates"`
}

// Status returns the state of the election. Returns an
// *InvalidRequestError for a bad name and ErrUnavailable (wrapped) when the
// server could not answer.
func (e *Election) Status(ctx context.Context) (ElectionState, error) {
	var st ElectionState
	if err := e.c.state(ctx, e.target(""), &st); err != nil {
		return ElectionState{}, err
	}
	if st.Leader != nil {
		st.Leader.TTL = time.Duration(st.Leader.TTLMS) * time.Millisecond
	}
	return st, nil
}

// Leader returns the election's leader, or nil when it is vacant. Returns
// the errors of Status.
func (e *Election) Leader(ctx context.Context) (*Leader, error) {
	st, err := e.Status(ctx)
	return st.Leader, err
}

// Observe follows who leads the election without campaigning, as
// etcd's Election.Observe does: it sends the leader when the watch starts
// and again on every change, a new term elected or a new value proclaimed,
// and a zero Leader (Term 0) when the election is vacant. It never sends
// the same leader twice in a row. It follows the election's watch stream
// (Client.Watch with KindElection), reconnecting as Watch does, so a change
// missed while disconnected is sent once the stream is back. The channel
// is closed when ctx ends, or after a last Leader with Err set (and
// nothing else) when the server refuses the watch (a bad name, a key
// without the locks:read scope, too many streams of this client).
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader, 1)
	go func() {
		defer close(out)
		var last *Leader
		for ev := range e.c.Watch(ctx, KindElection, e.name) {
			var now Leader
			if ev.Err != nil {
				select {
				case out <- Leader{Err: ev.Err}:
				case <-ctx.Done():
				}
				return
			}
			switch ev.Type {
			case EventState:
				var st ElectionState
				if json.Unmarshal(ev.State, &st) != nil {
					continue
				}
				if st.Leader != nil {
					now = *st.Leader
					now.TTL = time.Duration(now.TTLMS) * time.Millisecond
				}
			case EventElected, EventProclaimed:
				now = Leader{Value: ev.Value, Term: ev.Fence, Owner: ev.Owner, Since: ev.Since, TTL: ev.TTL,
					TTLMS: ev.TTL.Milliseconds(), ExpiresAt: ev.ExpiresAt}
			case EventVacant:
			default:
				continue
			}
			if last != nil && last.Term == now.Term && last.Value == now.Value {
				continue
			}
			last = &now
			select {
			case out <- now:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
