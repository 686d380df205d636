package client

import (
	"context"
	"fmt"
	"net/http"
)

// Modes of a read/write lock's lease.
const (
	modeRead  = "read"
	modeWrite = "write"
)

// RWLock is a read/write lock of the server: any number of read leases at
// once, or one write lease. Its names are a namespace of their own, apart
// from the locks of Client.Lock. Each lease, read or write, is a *Lease of
// its own with its own token, TTL and fence: every grant's fence is
// strictly greater than every fence issued before for the name. A writer
// that waits keeps readers that come after it waiting too, so writers are
// not starved. An RWLock is safe for concurrent use.
//
// A lease's token is fresh for each acquire, so a goroutine that holds a
// read lease and asks for the write lease waits for itself: release the
// read lease first. (The server refuses the write lease to the token of a
// read lease with upgrade-not-supported, ErrUpgradeNotSupported.) The other
// way round, Downgrade takes the read lease with the write lease's token.
type RWLock struct {
	c    *Client
	name string
}

// RWLock returns the read/write lock name. It sends no request.
func (c *Client) RWLock(name string) *RWLock { return &RWLock{c: c, name: name} }

func (rw *RWLock) target(mode string) target { return target{kind: kindRW, name: rw.name, mode: mode} }

// RLock acquires a read lease, waiting up to opts.Wait (zero: until ctx is
// done) while a writer holds the lock or waits for it. It settles an
// acquire whose outcome is unknown as Client.Lock does, and keeps the
// lease alive with opts.KeepAlive as Client.Lock does.
//
// Returns a *HeldError (errors.Is(err, ErrHeld)) when the lock is still
// write-held (or a writer waits first) when the wait ends, ErrModeMismatch
// when opts.Fair differs from the lock's current mode, and the errors of
// Client.Lock.
func (rw *RWLock) RLock(ctx context.Context, opts LockOptions) (*Lease, error) {
	return rw.c.lock(ctx, rw.target(modeRead), NewToken(), opts)
}

// TryRLock acquires a read lease if no writer holds the lock or waits for
// it, without waiting. Returns the errors of RLock.
func (rw *RWLock) TryRLock(ctx context.Context, opts LockOptions) (*Lease, error) {
	opts.Wait = -1
	return rw.RLock(ctx, opts)
}

// Lock acquires the write lease, waiting up to opts.Wait (zero: until ctx
// is done) while a writer or any reader holds the lock. Readers that come
// after it wait behind it.
//
// Returns a *HeldError (errors.Is(err, ErrHeld)) when the lock is still
// held when the wait ends, ErrModeMismatch when opts.Fair differs from the
// lock's current mode, and the errors of Client.Lock.
func (rw *RWLock) Lock(ctx context.Context, opts LockOptions) (*Lease, error) {
	return rw.c.lock(ctx, rw.target(modeWrite), NewToken(), opts)
}

// TryLock acquires the write lease if the lock is free, without waiting.
// Returns the errors of Lock.
func (rw *RWLock) TryLock(ctx context.Context, opts LockOptions) (*Lease, error) {
	opts.Wait = -1
	return rw.Lock(ctx, opts)
}

// RHold acquires a read lease held for as long as the connection that asked
// for it stays open, as Client.Hold does for a lock. Returns the errors of
// RLock.
func (rw *RWLock) RHold(ctx context.Context, opts HoldOptions) (*Lease, error) {
	return rw.c.hold(ctx, rw.target(modeRead), opts)
}

// Hold acquires the write lease held for as long as the connection that
// asked for it stays open, as Client.Hold does for a lock. Returns the
// errors of Lock.
func (rw *RWLock) Hold(ctx context.Context, opts HoldOptions) (*Lease, error) {
	return rw.c.hold(ctx, rw.target(modeWrite), opts)
}

// Downgrade takes a read lease with the token of w, the write lease of this
// lock, without waiting: readers waiting behind w stay behind this lease
// too. The new lease has a fence of its own. Unlock w afterwards to let
// other readers in and keep reading under the read lease; call Downgrade
// once per write lease.
//
// Returns an error without asking the server when w is not a write lease
// of this lock, and the errors of RLock (ErrLeaseNotFound when w is gone).
func (rw *RWLock) Downgrade(ctx context.Context, w *Lease, opts LockOptions) (*Lease, error) {
	if w.t != rw.target(modeWrite) {
		return nil, fmt.Errorf("client: downgrade %s: the lease is not this lock's write lease", rw.name)
	}
	opts.Wait = -1
	return rw.c.lock(ctx, rw.target(modeRead), w.Token, opts)
}

// ForceRelease frees the lock whoever holds it: the writer's and every
// reader's lease end (they see force_released), and waiters are woken. It
// needs the admin credential as the client's API key, and is not retried
// after a request was sent, as Client.ForceRelease. Returns a *Problem with
// status 403 without the admin credential.
func (rw *RWLock) ForceRelease(ctx context.Context) error {
	return rw.c.forceRelease(ctx, rw.target(modeWrite))
}

// RWLockState is what the server tells about a read/write lock. It never
// holds a token.
type RWLockState struct {
	Name string `json:"name"`
	// WriteHeld says whether a writer holds the lock.
	WriteHeld bool `json:"write_held"`
	// Readers is the number of read leases held.
	Readers int64 `json:"readers"`
	// Fence is the writer's fence while write-held, else the last one
	// issued.
	Fence   int64 `json:"fence"`
	Waiters struct {
		Read  int64 `json:"read"`
		Write int64 `json:"write"`
	} `json:"waiters"`
	Fair bool `json:"fair"`
}

// Status returns the state of the lock. Returns an *InvalidRequestError for
// a bad name and ErrUnavailable (wrapped) when the server could not answer.
func (rw *RWLock) Status(ctx context.Context) (RWLockState, error) {
	var st RWLockState
	err := rw.c.state(ctx, rw.target(modeRead), &st)
	return st, err
}

// state reads the state of t, without a token, into v.
func (c *Client) state(ctx context.Context, t target, v any) error {
	req := request{method: http.MethodGet, path: t.path()}
	resp, err := c.do(ctx, req, true)
	if err != nil {
		return err
	}
	return decode(req, resp, v)
}
