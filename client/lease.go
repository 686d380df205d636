package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// ErrReleased is what Lease.Err returns once the lease was released, by
// Unlock or (for a hold) by its owner through the API.
var ErrReleased = errors.New("client: lease released")

// ErrLost is matched (errors.Is) by every *LostError.
var ErrLost = errors.New("client: lease lost")

// Why a lease was lost, as LostError.Reason. The first four are the
// server's own reasons; the last two are what the client saw.
const (
	// ReasonExpired: the server found the lease's TTL ran out.
	ReasonExpired = "expired"
	// ReasonForceReleased: an administrator force-released the lock.
	ReasonForceReleased = "force_released"
	// ReasonMaxHold: a keep-alive lease reached its max hold.
	ReasonMaxHold = "max_hold"
	// ReasonHeartbeatMissed: a keep-alive lease's holder did not renew within
	// its heartbeat.
	ReasonHeartbeatMissed = "heartbeat_missed"
	// ReasonValidityElapsed: ValidUntil passed without a renewal the server
	// confirmed (the lease had no keep-alive, or the server or its store did
	// not answer in time). The server may still hold the lease for a
	// moment, but the caller must not rely on it any more.
	ReasonValidityElapsed = "validity_elapsed"
	// ReasonConnectionLost: the stream of a hold broke. The server releases
	// a hold whose connection closes.
	ReasonConnectionLost = "connection_lost"
)

// LostError is what Lease.Err returns for a lost lease.
type LostError struct {
	Name   string
	Fence  int64
	Reason string // one of the Reason constants
	Err    error  // what the client saw, when it saw an error
}

func (e *LostError) Error() string {
	msg := fmt.Sprintf("client: lease of %s (fence %d) lost: %s", e.Name, e.Fence, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrLost) hold.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap returns the error the client saw, if any.
func (e *LostError) Unwrap() error { return e.Err }

// Lease is a granted lock: of a lock, a read or the write lease of a
// read/write lock, or permits of a semaphore. Name, Fence and Token never
// change. A Lease is safe for concurrent use.
//
// Use the lease only while time.Now() is before ValidUntil, and pass Fence
// to whatever the lock protects so that it can refuse a write from a holder
// whose lease has ended (see the package example).
type Lease struct {
	// Name is the lock's (read/write lock's, semaphore's) name.
	Name string
	// Fence is strictly greater than every fence issued before for Name.
	Fence int64
	// Token proves ownership of the lease. Keep it secret.
	Token string

	c *Client
	t target // what the lease is held on

	mu         sync.Mutex
	validUntil time.Time
	timer      *time.Timer // fires at validUntil
	err        error
	done       chan struct{}
	stop       context.CancelFunc // ends the heartbeats or the stream
	bg         sync.WaitGroup
	unlocked   bool
}

// leaseJSON is the server's lease object.
type leaseJSON struct {
	Name      string `json:"name"`
	Token     string `json:"token"`
	Fence     int64  `json:"fence"`
	HoldCount int64  `json:"hold_count"`
	TTLMS     int64  `json:"ttl_ms"`
	Reentrant bool   `json:"reentrant"`
	// WaitedMS: the server had waited this long when its attempt that
	// granted the lease began, so the lease's TTL runs from at least the
	// request's send time plus this.
	WaitedMS int64 `json:"waited_ms"`
}

// newLease starts the life of a granted lease of t: valid for ttl from sent.
func (c *Client) newLease(t target, token string, fence int64, sent time.Time, ttl time.Duration) *Lease {
	l := &Lease{Name: t.name, Fence: fence, Token: token, c: c, t: t, done: make(chan struct{}),
		validUntil: sent.Add(ttl), stop: func() {}}
	l.mu.Lock() // the timer may fire before it is stored
	l.timer = time.AfterFunc(time.Until(l.validUntil), l.elapsed)
	l.mu.Unlock()
	return l
}

// ValidUntil is when the lease ends at the latest unless it is renewed,
// on the caller's monotonic clock: the time the request that granted (or
// last renewed) it was sent, plus how long the server had waited when it
// made the attempt that granted it (waited_ms), plus the TTL the server
// answered. A lease the
// server keeps alive moves it forward with each confirmed renewal. A hold
// moves it with each renewal its stream reports, to the event's arrival
// plus two thirds of the TTL (see Client.Hold for the bound this keeps).
func (l *Lease) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Done returns a channel that is closed when the lease is lost or ends
// (Unlock, or ValidUntil passing without a renewal). Err then says why.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err is nil while Done is open. Afterwards it is ErrReleased when the lease
// was released, or a *LostError (errors.Is(err, ErrLost)) saying why it was
// lost.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// finish ends the lease with err, once.
func (l *Lease) finish(err error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = err
	l.timer.Stop()
	stop := l.stop
	l.mu.Unlock()
	stop()
	close(l.done)
}

func (l *Lease) lost(reason string, err error) {
	l.finish(&LostError{Name: l.Name, Fence: l.Fence, Reason: reason, Err: err})
}

// elapsed runs when the timer fires; it ends the lease unless a renewal
// moved validUntil after the timer was set.
func (l *Lease) elapsed() {
	l.mu.Lock()
	left := time.Until(l.validUntil)
	if left > 0 && l.err == nil {
		l.timer.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.lost(ReasonValidityElapsed, nil)
}

// extend moves validUntil to until when that is later and the lease has not
// ended.
func (l *Lease) extend(until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || !until.After(l.validUntil) {
		return
	}
	l.validUntil = until
	l.timer.Reset(time.Until(until))
}

// Renew extends the lease by ttl from now (zero: by the TTL it was granted
// with) and moves ValidUntil. For a keep-alive lease with a heartbeat it is
// also the heartbeat, which the client already sends on its own. Returns
// ErrLeaseNotFound or ErrNotOwner (and ends the lease, Err saying why) when
// the lease is gone, the lease's Err when it already ended, ErrUnavailable
// when the server could not be reached.
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) error {
	if err := l.Err(); err != nil {
		return err
	}
	var body any
	if ttl > 0 {
		body = map[string]string{"ttl": ttl.String()}
	}
	req := request{method: http.MethodPost, path: l.t.path() + "/renew", query: l.t.query(), body: body, token: l.Token}
	resp, err := l.c.do(ctx, req, true)
	if err != nil {
		if errors.Is(err, ErrLeaseNotFound) || errors.Is(err, ErrNotOwner) {
			l.lost(l.c.lostReason(ctx, l.t, l.Token), err)
		}
		return err
	}
	var lj leaseJSON
	if err := decode(req, resp, &lj); err != nil {
		return err
	}
	l.extend(resp.sent.Add(time.Duration(lj.TTLMS) * time.Millisecond))
	return nil
}

// Unlock releases the lease and ends it (Err becomes ErrReleased): one hold
// of a lock's lease, this read or write lease of a read/write lock, or a
// semaphore lease's permits. A release whose outcome is unknown (a 503 or a
// broken connection) is settled by inspecting the lock with the token
// before it is sent again, so a lease is never released twice. Returns ErrLeaseNotFound or ErrNotOwner when the
// lease had already ended on the server (it expired or was taken over: the
// work done under it may not have been protected), ErrUnavailable when the
// server could not be reached (the lease then ends with its TTL, or at
// once for a hold, whose stream is closed).
func (l *Lease) Unlock(ctx context.Context) error {
	l.mu.Lock()
	if l.unlocked {
		l.mu.Unlock()
		return nil
	}
	l.unlocked = true
	l.mu.Unlock()
	err := l.c.release(ctx, l.t, l.Token)
	switch {
	case err == nil:
		l.finish(ErrReleased)
	case errors.Is(err, ErrLeaseNotFound) || errors.Is(err, ErrNotOwner):
		l.lost(l.c.lostReason(ctx, l.t, l.Token), err)
	default:
		l.lost(ReasonConnectionLost, err)
	}
	l.bg.Wait()
	return err
}

// release gives back one hold of token on t. An attempt whose outcome is
// unknown is settled with an inspection: if the token no longer owns the
// lease, the release happened.
func (c *Client) release(ctx context.Context, t target, token string) error {
	req := request{method: http.MethodDelete, path: t.path(), query: t.query(), token: token}
	for attempt := 1; ; attempt++ {
		resp, err := c.send(ctx, req)
		if err == nil && resp.status >= 300 {
			err = errorOf(req, resp)
		}
		if err == nil || !retryable(resp, err, true) || attempt >= c.retry.Attempts {
			if err != nil && attempt > 1 && errors.Is(err, ErrLeaseNotFound) {
				return nil // an earlier attempt released it
			}
			return err
		}
		if werr := c.pause(ctx, attempt, resp); werr != nil {
			return errors.Join(err, werr)
		}
		if o, ierr := c.owned(ctx, t, token); ierr == nil && !o.holds(t) {
			return nil
		}
	}
}

// lostReason asks the server why token lost its lease of t; "expired" when
// it does not say.
func (c *Client) lostReason(ctx context.Context, t target, token string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if o, err := c.owned(ctx, t, token); err == nil && o.LostReason != "" {
		return o.LostReason
	}
	return ReasonExpired
}

// heartbeat renews a keep-alive lease every period until it ends. A renewal
// that finds the lease gone ends it with the server's reason; failures to
// reach the server are tried again, and the lease ends when ValidUntil
// passes without a confirmed renewal.
func (l *Lease) heartbeat(ctx context.Context, period time.Duration) {
	defer l.bg.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithDeadline(ctx, l.ValidUntil())
		_ = l.Renew(rctx, 0)
		cancel()
	}
}
