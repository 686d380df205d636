package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// LockOptions tunes an acquire. Zero values take the server's defaults.
type LockOptions struct {
	// TTL is the lease's time to live (server default 30s).
	TTL time.Duration
	// Wait bounds how long Lock waits for a held lock; zero waits until ctx
	// is done. TryLock ignores it.
	Wait time.Duration
	// Fair queues this waiter in arrival order among fair waiters.
	Fair bool
	// KeepAlive has the server renew the lease every TTL/3 until it is
	// released, lost or past MaxHold. The client confirms it by renewing
	// (see Heartbeat) and ends the lease when it cannot.
	KeepAlive bool
	// MaxHold bounds a keep-alive lease (server default 1h).
	MaxHold time.Duration
	// Heartbeat, with KeepAlive, makes the server stop renewing the lease
	// when this client has not renewed it within Heartbeat: the client
	// renews it twice per Heartbeat for as long as the lease lives, so a
	// crashed process loses its lease within Heartbeat. Without it, the
	// client renews a keep-alive lease every TTL/3 to learn that it is
	// still held.
	Heartbeat time.Duration
	// Owner describes the holder for people looking at the lock (at most
	// 128 printable characters): Status shows it to anyone while the lease
	// is held. It is not a secret and proves nothing. A reentrant acquire
	// keeps the first grant's owner. A server before owners were recorded
	// refuses the request with an *InvalidRequestError naming "owner", and
	// so does any server for a text that is too long or not printable.
	Owner string
}

// acquireBody is the JSON body of an acquire or hold request.
type acquireBody struct {
	TTL       string `json:"ttl,omitempty"`
	Wait      string `json:"wait,omitempty"`
	Fair      bool   `json:"fair,omitempty"`
	KeepAlive bool   `json:"keepalive,omitempty"`
	MaxHold   string `json:"max_hold,omitempty"`
	Heartbeat string `json:"heartbeat,omitempty"`
	Owner     string `json:"owner,omitempty"`
	Mode      string `json:"mode,omitempty"`    // a read/write lock's
	Permits   int64  `json:"permits,omitempty"` // a semaphore's
	Count     int64  `json:"count,omitempty"`   // a semaphore's
	Value     string `json:"value,omitempty"`   // an election's
}

func durationString(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}

func (o LockOptions) body() acquireBody {
	return acquireBody{TTL: durationString(o.TTL), Fair: o.Fair, KeepAlive: o.KeepAlive,
		MaxHold: durationString(o.MaxHold), Heartbeat: durationString(o.Heartbeat), Owner: o.Owner}
}

// maxRequestWait bounds the wait asked of the server in one request (its
// default cap is 60s): a longer wait is asked for again after each lock-held
// answer.
const maxRequestWait = 30 * time.Second

// settleTimeout bounds the settling of an acquire whose outcome is unknown,
// which goes on after the caller's context is done.
const settleTimeout = 10 * time.Second

// NewToken returns a fresh lock token: 128 bits from crypto/rand, base64url
// (22 characters).
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// TryLock acquires the lock name if it is free, without waiting. Returns a
// *HeldError (errors.Is(err, ErrHeld)) when it is held, and the errors of
// Lock.
func (c *Client) TryLock(ctx context.Context, name string, opts LockOptions) (*Lease, error) {
	opts.Wait = -1
	return c.Lock(ctx, name, opts)
}

// Lock acquires the lock name, waiting for it up to opts.Wait (zero: until
// ctx is done), woken by the server as soon as it is released.
//
// The client sends its own token, so an acquire whose outcome is unknown (a
// 503 or a connection broken after the request was sent) is settled before
// Lock returns: it is sent again with the same token (a grant that had
// happened then shows as reentrant and its extra holds are given back), or,
// when Lock gives up, the lock is inspected with the token and released if
// it was granted. Lock never leaves a lease behind nor a hold count off by
// one, unless the server stays unreachable while settling (the lease then
// ends with its TTL).
//
// Returns a *HeldError when the lock is still held when the wait ends, an
// *InvalidRequestError for a bad name or option, ErrUnavailable (wrapped)
// when the server could not answer, and the context's error when ctx ends
// first.
func (c *Client) Lock(ctx context.Context, name string, opts LockOptions) (*Lease, error) {
	return c.lock(ctx, lockTarget(name), NewToken(), opts)
}

// lock acquires a lease of t with token; see Lock. token holds no lease of
// t before the call, so a grant that comes back reentrant (200) counts the
// holds of earlier attempts whose answers were lost.
func (c *Client) lock(ctx context.Context, t target, token string, opts LockOptions) (*Lease, error) {
	req := request{method: http.MethodPost, path: t.path(), token: token}
	resp, err := c.acquire(ctx, t, req, opts, c.send)
	if err != nil {
		return nil, err
	}
	var lj leaseJSON
	if err := decode(req, resp, &lj); err != nil {
		_ = c.settle(ctx, t, token)
		return nil, err
	}
	if resp.status == http.StatusOK { // reentrant: an earlier attempt was granted too
		if err := c.giveBackExtra(ctx, t, token, lj.HoldCount); err != nil {
			return nil, fmt.Errorf("acquire %s: %w", t.name, err)
		}
	}
	// The TTL runs from the attempt that granted the lease: after a wait,
	// that is at least the wait's time after the request was sent.
	l := c.newLease(t, token, lj.Fence, resp.sent.Add(time.Duration(lj.WaitedMS)*time.Millisecond),
		time.Duration(lj.TTLMS)*time.Millisecond)
	if opts.KeepAlive {
		period := renewInterval(time.Duration(lj.TTLMS) * time.Millisecond)
		if opts.Heartbeat > 0 {
			period = opts.Heartbeat / 2
		}
		ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		l.mu.Lock()
		l.stop = cancel
		l.mu.Unlock()
		l.bg.Add(1)
		go l.heartbeat(ctx, period)
	}
	return l, nil
}

// acquire sends an acquire request (req, with opts and t's fields as its
// body) for t with send until it is granted, refused, or the wait ends; see
// Lock. It returns the granting answer.
func (c *Client) acquire(ctx context.Context, t target, req request, opts LockOptions,
	send func(context.Context, request) (response, error)) (response, error) {
	var deadline time.Time
	if opts.Wait > 0 {
		deadline = time.Now().Add(opts.Wait)
	}
	unknown := 0 // attempts whose outcome is unknown so far
	for {
		body := opts.body()
		t.fill(&body)
		if opts.Wait >= 0 {
			wait := maxRequestWait
			if !deadline.IsZero() {
				wait = min(wait, time.Until(deadline))
			}
			if d, ok := ctx.Deadline(); ok {
				wait = min(wait, time.Until(d))
			}
			if wait <= 0 {
				wait = 0
			}
			body.Wait = durationString(wait.Round(time.Millisecond))
		}
		req.body = body
		resp, err := send(ctx, req)
		if err == nil && resp.status >= 300 {
			err = errorOf(req, resp)
		}
		switch {
		case err == nil:
			return resp, nil
		case errors.Is(err, ErrHeld):
			if opts.Wait < 0 || ctx.Err() != nil || (!deadline.IsZero() && !time.Now().Before(deadline)) {
				return resp, err
			}
			continue // the server waited its share; ask again
		case unknown > 0 && errors.Is(err, errTokenInUse):
			// A semaphore lease is not reentrant: an earlier attempt whose
			// answer was lost was granted. Give it back and ask again.
			if serr := c.settle(ctx, t, req.token); serr != nil {
				return resp, fmt.Errorf("%w (and giving back an earlier grant failed: %w; it ends with its TTL)", err, serr)
			}
			continue
		case ctx.Err() != nil || errors.Is(err, ErrUnavailable):
			unknown++
			if ctx.Err() == nil && unknown < c.retry.Attempts {
				if werr := c.pause(ctx, unknown, resp); werr == nil {
					continue
				}
			}
			if serr := c.settle(ctx, t, req.token); serr != nil {
				err = fmt.Errorf("%w (and the outcome is unknown: %w; a lease granted then ends with its TTL)", err, serr)
			}
			if ctx.Err() != nil {
				err = errors.Join(context.Cause(ctx), err)
			}
			return resp, err
		default:
			return resp, err
		}
	}
}

// giveBackExtra releases the holds above the first of a lease whose grant
// came back reentrant with holdCount holds: the token is this call's own, so
// every hold beyond one was granted to an attempt whose answer was lost.
// When a release fails, every hold of the token is settled (released) and
// the error returned.
func (c *Client) giveBackExtra(ctx context.Context, t target, token string, holdCount int64) error {
	for n := holdCount; n > 1; n-- {
		if err := c.release(context.WithoutCancel(ctx), t, token); err != nil {
			_ = c.settle(ctx, t, token)
			return fmt.Errorf("give back the extra hold of an attempt granted twice: %w", err)
		}
	}
	return nil
}

// settle makes sure token holds nothing on t (for a read/write lock, no
// lease of t's mode): every hold it has is released. It runs past the end of
// ctx, for at most settleTimeout.
func (c *Client) settle(ctx context.Context, t target, token string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	for range 1000 { // a token's holds are bounded by the attempts made; this only bounds a bug
		o, err := c.owned(ctx, t, token)
		if err != nil {
			return err
		}
		if !o.holds(t) {
			return nil
		}
		if err := c.release(ctx, t, token); err != nil && !errors.Is(err, ErrLeaseNotFound) {
			return err
		}
	}
	return errors.New("still owned after many releases")
}

// LockState is what the server tells about a lock. It never holds a token.
type LockState struct {
	Name      string        `json:"name"`
	Held      bool          `json:"held"`
	HoldCount int64         `json:"hold_count"`
	TTL       time.Duration `json:"-"`
	TTLMS     int64         `json:"ttl_ms"`
	ExpiresAt *time.Time    `json:"expires_at,omitempty"`
	// Fence is the holder's fence, or the last one issued when free.
	Fence int64 `json:"fence"`
	// Owned says whether the token given owns the lease (Status gives none).
	Owned   bool  `json:"owned"`
	Waiters int64 `json:"waiters"`
	Fair    bool  `json:"fair"`
	// KeepAlive is set when the server keeps the lease alive.
	KeepAlive *KeepAliveState `json:"keepalive,omitempty"`
	// Owner is the text the lease was acquired with (LockOptions.Owner),
	// while held; empty when none was given.
	Owner string `json:"owner,omitempty"`
	// GrantedAt is when the lease was first granted, by the server's store
	// clock, while held.
	GrantedAt *time.Time `json:"granted_at,omitempty"`
	// LostReason says why the token given lost its lease, when known.
	LostReason string `json:"lost_reason,omitempty"`
}

// KeepAliveState describes the keep-alive of a lease.
type KeepAliveState struct {
	MaxHoldUntil time.Time  `json:"max_hold_until"`
	HeartbeatMS  int64      `json:"heartbeat_ms,omitempty"`
	HeartbeatDue *time.Time `json:"heartbeat_due,omitempty"`
}

// Status returns the state of the lock name. Returns an
// *InvalidRequestError for a bad name and ErrUnavailable (wrapped) when the
// server could not answer.
func (c *Client) Status(ctx context.Context, name string) (LockState, error) {
	return c.inspect(ctx, name, "")
}

// Inspect returns the state of the lock name as seen by l's token: Owned
// says whether l still holds it, LostReason why not. For a lease of a
// read/write lock or of a semaphore only Name, Owned, Fence (l's) and
// LostReason are set (RWLock.Status and Semaphore.Status tell the rest).
func (l *Lease) Inspect(ctx context.Context) (LockState, error) {
	if l.t.kind == kindLock {
		return l.c.inspect(ctx, l.Name, l.Token)
	}
	o, err := l.c.owned(ctx, l.t, l.Token)
	if err != nil {
		return LockState{}, err
	}
	return LockState{Name: l.Name, Owned: o.holds(l.t), Fence: l.Fence, LostReason: o.LostReason}, nil
}

func (c *Client) inspect(ctx context.Context, name, token string) (LockState, error) {
	req := request{method: http.MethodGet, path: lockPath(name), token: token}
	resp, err := c.do(ctx, req, true)
	if err != nil {
		return LockState{}, err
	}
	var st LockState
	if err := decode(req, resp, &st); err != nil {
		return LockState{}, err
	}
	st.TTL = time.Duration(st.TTLMS) * time.Millisecond
	return st, nil
}

// ForceRelease frees the lock name whoever holds it: the holder's lease
// ends (it sees force_released) and waiters are woken. It needs the admin
// credential as the client's API key. It is not retried after a request
// was sent: a second force-release could free the next holder's lease.
// Returns a *Problem with status 403 without the admin credential.
func (c *Client) ForceRelease(ctx context.Context, name string) error {
	return c.forceRelease(ctx, lockTarget(name))
}

// forceRelease frees t whoever holds it; see ForceRelease.
func (c *Client) forceRelease(ctx context.Context, t target) error {
	req := request{method: http.MethodDelete, path: t.path(), query: url.Values{"force": {"true"}}}
	_, err := c.do(ctx, req, false)
	return err
}
