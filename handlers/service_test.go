package handlers_test

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// The real services are what the router is built on in production.
var (
	_ handlers.Locks      = (*locks.Service)(nil)
	_ handlers.RateLimits = (*ratelimit.Service)(nil)
)

// errUnexpectedCall is what fakeService answers for a method a test did not
// expect to be called.
var errUnexpectedCall = errors.New("fake service: unexpected call")

// fakeService implements handlers.Locks and handlers.RateLimits with one function field per
// method, like wtf's mock package. It records every call; a method whose
// field is nil answers errUnexpectedCall. Like *locks.Service, whose checks
// the handlers rely on, its lock methods first refuse a bad name, token or
// owner with the service's own checks (see checkLockInput).
type fakeService struct {
	AcquireFn      func(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error)
	RenewFn        func(ctx context.Context, name, token string, ttl time.Duration) (locks.Lease, error)
	ReleaseFn      func(ctx context.Context, name, token string) (locks.Released, error)
	ForceReleaseFn func(ctx context.Context, name string) (bool, error)
	InspectFn      func(ctx context.Context, name, token string) (locks.LockState, error)
	ReadyFn        func(ctx context.Context) error
	HoldFn         func(ctx context.Context, name string, req locks.AcquireRequest) (*locks.Hold, error)
	fakeRW         // the read/write lock's methods (rwlocks_test.go)

	PolicyFn func(name string) (ratelimit.Policy, error)
	CheckFn  func(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error)
	// TopDeniedFn answers GET /v1/ratelimit/policies/{policy}/top.
	TopDeniedFn func(ctx context.Context, policy string, n int) (ratelimit.TopKeys, error)
	// ResetKeyFn answers DELETE /v1/ratelimit/policies/{policy}/keys/{key}.
	ResetKeyFn func(ctx context.Context, policy, key string) (int64, error)

	fakeSemaphores
	fakeElections // elections_fake_test.go, with their listing
	fakeListings  // the listings (list_test.go)
	fakeWatches   // watch streams (list_test.go)

	mu    sync.Mutex
	calls []string
	names []string // the lock names the lock methods were given, in order
}

var (
	_ handlers.Locks      = (*fakeService)(nil)
	_ handlers.RateLimits = (*fakeService)(nil)
)

// checkLockInput refuses what *locks.Service refuses before it calls Redis:
// a bad name, a bad token (when one is given) or a bad owner, with the same
// *ValidationError. Renew and Release get their token from the handler only
// when the request has one.
func checkLockInput(name, token, owner string) error {
	if err := locks.ValidateName(name); err != nil {
		return err
	}
	if token != "" {
		if err := locks.ValidateToken(token); err != nil {
			return err
		}
	}
	return locks.ValidateOwner(owner)
}

func (f *fakeService) record(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method)
}

// recordLock records a call of a lock method and the lock name it was given.
func (f *fakeService) recordLock(method, name string) {
	f.record(method)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.names = append(f.names, name)
}

// Names returns the lock names the lock methods were given so far, in order.
func (f *fakeService) Names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.names...)
}

// Calls returns the names of the methods called so far, in order.
func (f *fakeService) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeService) Acquire(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
	f.recordLock("Acquire", name)
	if err := checkLockInput(name, req.Token, req.Owner); err != nil {
		return locks.Lease{}, err
	}
	if f.AcquireFn == nil {
		return locks.Lease{}, errUnexpectedCall
	}
	return f.AcquireFn(ctx, name, req)
}

func (f *fakeService) Renew(ctx context.Context, name, token string, ttl time.Duration) (locks.Lease, error) {
	f.recordLock("Renew", name)
	if err := checkLockInput(name, token, ""); err != nil {
		return locks.Lease{}, err
	}
	if f.RenewFn == nil {
		return locks.Lease{}, errUnexpectedCall
	}
	return f.RenewFn(ctx, name, token, ttl)
}

func (f *fakeService) Release(ctx context.Context, name, token string) (locks.Released, error) {
	f.recordLock("Release", name)
	if err := checkLockInput(name, token, ""); err != nil {
		return locks.Released{}, err
	}
	if f.ReleaseFn == nil {
		return locks.Released{}, errUnexpectedCall
	}
	return f.ReleaseFn(ctx, name, token)
}

func (f *fakeService) ForceRelease(ctx context.Context, name string) (bool, error) {
	f.recordLock("ForceRelease", name)
	if err := checkLockInput(name, "", ""); err != nil {
		return false, err
	}
	if f.ForceReleaseFn == nil {
		return false, errUnexpectedCall
	}
	return f.ForceReleaseFn(ctx, name)
}

func (f *fakeService) Inspect(ctx context.Context, name, token string) (locks.LockState, error) {
	f.recordLock("Inspect", name)
	if err := checkLockInput(name, token, ""); err != nil {
		return locks.LockState{}, err
	}
	if f.InspectFn == nil {
		return locks.LockState{}, errUnexpectedCall
	}
	return f.InspectFn(ctx, name, token)
}

func (f *fakeService) Ready(ctx context.Context) error {
	f.record("Ready")
	if f.ReadyFn == nil {
		return errUnexpectedCall
	}
	return f.ReadyFn(ctx)
}

func (f *fakeService) Hold(ctx context.Context, name string, req locks.AcquireRequest) (*locks.Hold, error) {
	f.recordLock("Hold", name)
	if err := checkLockInput(name, req.Token, req.Owner); err != nil {
		return nil, err
	}
	if f.HoldFn == nil {
		return nil, errUnexpectedCall
	}
	return f.HoldFn(ctx, name, req)
}
