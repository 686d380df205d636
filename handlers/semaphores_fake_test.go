package handlers_test

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// fakeSemaphores implements handlers.Semaphores for fakeService (which
// embeds it) with one function field per method; a nil field answers
// errUnexpectedCall. Like *locks.Service it first refuses a bad name or
// token with the service's own checks.
type fakeSemaphores struct {
	AcquireSemaphoreFn      func(ctx context.Context, name string, req locks.SemaphoreRequest) (locks.SemaphoreLease, error)
	RenewSemaphoreFn        func(ctx context.Context, name, token string, ttl time.Duration) (locks.SemaphoreLease, error)
	ReleaseSemaphoreFn      func(ctx context.Context, name, token string) (int64, error)
	ForceReleaseSemaphoreFn func(ctx context.Context, name string) (int64, error)
	SetSemaphorePermitsFn   func(ctx context.Context, name string, permits int64) (locks.SemaphoreState, error)
	InspectSemaphoreFn      func(ctx context.Context, name, token string) (locks.SemaphoreState, error)
	HoldSemaphoreFn         func(ctx context.Context, name string, req locks.SemaphoreRequest) (*locks.Hold, error)
}

func (f *fakeSemaphores) HoldSemaphore(ctx context.Context, name string, req locks.SemaphoreRequest) (*locks.Hold, error) {
	var err error
	h, cerr := fakeCall(name, req.Token, req.Owner, func() (h *locks.Hold) {
		h, err = f.HoldSemaphoreFn(ctx, name, req)
		return h
	}, f.HoldSemaphoreFn != nil)
	return h, firstErr(cerr, err)
}

// fakeCall runs fn when it is set, after the service's input checks.
func fakeCall[T any](name, token, owner string, fn func() T, set bool) (T, error) {
	var zero T
	if err := checkLockInput(name, token, owner); err != nil {
		return zero, err
	}
	if !set {
		return zero, errUnexpectedCall
	}
	return fn(), nil
}

func (f *fakeSemaphores) AcquireSemaphore(ctx context.Context, name string, req locks.SemaphoreRequest) (locks.SemaphoreLease, error) {
	var err error
	l, cerr := fakeCall(name, req.Token, req.Owner, func() (l locks.SemaphoreLease) {
		l, err = f.AcquireSemaphoreFn(ctx, name, req)
		return l
	}, f.AcquireSemaphoreFn != nil)
	return l, firstErr(cerr, err)
}

func (f *fakeSemaphores) RenewSemaphore(ctx context.Context, name, token string, ttl time.Duration) (locks.SemaphoreLease, error) {
	var err error
	l, cerr := fakeCall(name, token, "", func() (l locks.SemaphoreLease) {
		l, err = f.RenewSemaphoreFn(ctx, name, token, ttl)
		return l
	}, f.RenewSemaphoreFn != nil)
	return l, firstErr(cerr, err)
}

func (f *fakeSemaphores) ReleaseSemaphore(ctx context.Context, name, token string) (int64, error) {
	var err error
	n, cerr := fakeCall(name, token, "", func() (n int64) {
		n, err = f.ReleaseSemaphoreFn(ctx, name, token)
		return n
	}, f.ReleaseSemaphoreFn != nil)
	return n, firstErr(cerr, err)
}

func (f *fakeSemaphores) ForceReleaseSemaphore(ctx context.Context, name string) (int64, error) {
	var err error
	n, cerr := fakeCall(name, "", "", func() (n int64) {
		n, err = f.ForceReleaseSemaphoreFn(ctx, name)
		return n
	}, f.ForceReleaseSemaphoreFn != nil)
	return n, firstErr(cerr, err)
}

func (f *fakeSemaphores) SetSemaphorePermits(ctx context.Context, name string, permits int64) (locks.SemaphoreState, error) {
	var err error
	st, cerr := fakeCall(name, "", "", func() (st locks.SemaphoreState) {
		st, err = f.SetSemaphorePermitsFn(ctx, name, permits)
		return st
	}, f.SetSemaphorePermitsFn != nil)
	return st, firstErr(cerr, err)
}

func (f *fakeSemaphores) InspectSemaphore(ctx context.Context, name, token string) (locks.SemaphoreState, error) {
	var err error
	st, cerr := fakeCall(name, token, "", func() (st locks.SemaphoreState) {
		st, err = f.InspectSemaphoreFn(ctx, name, token)
		return st
	}, f.InspectSemaphoreFn != nil)
	return st, firstErr(cerr, err)
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
