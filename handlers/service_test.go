package handlers_test

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service"
)

// The real service is what the router is built on in production.
var _ handlers.Service = (*service.Service)(nil)

// errUnexpectedCall is what fakeService answers for a method a test did not
// expect to be called.
var errUnexpectedCall = errors.New("fake service: unexpected call")

// fakeService implements handlers.Service with one function field per
// method, like wtf's mock package. It records every call; a method whose
// field is nil answers errUnexpectedCall.
type fakeService struct {
	AcquireFn      func(ctx context.Context, name string, req service.AcquireRequest) (service.Lease, error)
	RenewFn        func(ctx context.Context, name, token string, ttl time.Duration) (service.Lease, error)
	ReleaseFn      func(ctx context.Context, name, token string) (service.Released, error)
	ForceReleaseFn func(ctx context.Context, name string) (bool, error)
	InspectFn      func(ctx context.Context, name, token string) (service.LockState, error)
	ReadyFn        func(ctx context.Context) error
	HoldFn         func(ctx context.Context, name string, req service.AcquireRequest) (*service.Hold, error)

	RateLimitPolicyFn func(name string) (service.Policy, error)
	CheckRateLimitFn  func(ctx context.Context, req service.RateLimitRequest) (service.Decision, error)

	mu    sync.Mutex
	calls []string
}

var _ handlers.Service = (*fakeService)(nil)

func (f *fakeService) record(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method)
}

// Calls returns the names of the methods called so far, in order.
func (f *fakeService) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeService) Acquire(ctx context.Context, name string, req service.AcquireRequest) (service.Lease, error) {
	f.record("Acquire")
	if f.AcquireFn == nil {
		return service.Lease{}, errUnexpectedCall
	}
	return f.AcquireFn(ctx, name, req)
}

func (f *fakeService) Renew(ctx context.Context, name, token string, ttl time.Duration) (service.Lease, error) {
	f.record("Renew")
	if f.RenewFn == nil {
		return service.Lease{}, errUnexpectedCall
	}
	return f.RenewFn(ctx, name, token, ttl)
}

func (f *fakeService) Release(ctx context.Context, name, token string) (service.Released, error) {
	f.record("Release")
	if f.ReleaseFn == nil {
		return service.Released{}, errUnexpectedCall
	}
	return f.ReleaseFn(ctx, name, token)
}

func (f *fakeService) ForceRelease(ctx context.Context, name string) (bool, error) {
	f.record("ForceRelease")
	if f.ForceReleaseFn == nil {
		return false, errUnexpectedCall
	}
	return f.ForceReleaseFn(ctx, name)
}

func (f *fakeService) Inspect(ctx context.Context, name, token string) (service.LockState, error) {
	f.record("Inspect")
	if f.InspectFn == nil {
		return service.LockState{}, errUnexpectedCall
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

func (f *fakeService) Hold(ctx context.Context, name string, req service.AcquireRequest) (*service.Hold, error) {
	f.record("Hold")
	if f.HoldFn == nil {
		return nil, errUnexpectedCall
	}
	return f.HoldFn(ctx, name, req)
}
