package handlers_test

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// fakeElections implements handlers.Elections for fakeService (which
// embeds it) with one function field per method; a nil field answers
// errUnexpectedCall. Like *locks.Service it first refuses a bad name,
// token or owner with the service's own checks, and a value too long.
type fakeElections struct {
	CampaignFn        func(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error)
	HoldElectionFn    func(ctx context.Context, name string, req locks.AcquireRequest) (*locks.Hold, error)
	ProclaimFn        func(ctx context.Context, name, token, value string) (locks.Lease, error)
	RenewElectionFn   func(ctx context.Context, name, token string, ttl time.Duration) (locks.Lease, error)
	ResignFn          func(ctx context.Context, name, token string) (locks.Released, error)
	ForceResignFn     func(ctx context.Context, name string) (bool, error)
	InspectElectionFn func(ctx context.Context, name, token string) (locks.ElectionState, error)
	ListElectionsFn   func(ctx context.Context, req locks.ListRequest) (locks.Page[locks.ElectionState], error)
}

// electionCall runs fn when it is set, after the service's input checks.
func electionCall[T any](name, token, owner, value string, fn func() (T, error), set bool) (T, error) {
	var zero T
	if err := checkLockInput(name, token, owner); err != nil {
		return zero, err
	}
	if err := locks.ValidateValue(value); err != nil {
		return zero, err
	}
	if !set {
		return zero, errUnexpectedCall
	}
	return fn()
}

func (f *fakeElections) Campaign(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
	return electionCall(name, req.Token, req.Owner, req.Value, func() (locks.Lease, error) { return f.CampaignFn(ctx, name, req) }, f.CampaignFn != nil)
}

func (f *fakeElections) HoldElection(ctx context.Context, name string, req locks.AcquireRequest) (*locks.Hold, error) {
	return electionCall(name, req.Token, req.Owner, req.Value, func() (*locks.Hold, error) { return f.HoldElectionFn(ctx, name, req) }, f.HoldElectionFn != nil)
}

func (f *fakeElections) Proclaim(ctx context.Context, name, token, value string) (locks.Lease, error) {
	return electionCall(name, token, "", value, func() (locks.Lease, error) { return f.ProclaimFn(ctx, name, token, value) }, f.ProclaimFn != nil)
}

func (f *fakeElections) RenewElection(ctx context.Context, name, token string, ttl time.Duration) (locks.Lease, error) {
	return electionCall(name, token, "", "", func() (locks.Lease, error) { return f.RenewElectionFn(ctx, name, token, ttl) }, f.RenewElectionFn != nil)
}

func (f *fakeElections) Resign(ctx context.Context, name, token string) (locks.Released, error) {
	return electionCall(name, token, "", "", func() (locks.Released, error) { return f.ResignFn(ctx, name, token) }, f.ResignFn != nil)
}

func (f *fakeElections) ForceResign(ctx context.Context, name string) (bool, error) {
	return electionCall(name, "", "", "", func() (bool, error) { return f.ForceResignFn(ctx, name) }, f.ForceResignFn != nil)
}

func (f *fakeElections) InspectElection(ctx context.Context, name, token string) (locks.ElectionState, error) {
	return electionCall(name, token, "", "", func() (locks.ElectionState, error) { return f.InspectElectionFn(ctx, name, token) }, f.InspectElectionFn != nil)
}

func (f *fakeElections) ListElections(ctx context.Context, req locks.ListRequest) (locks.Page[locks.ElectionState], error) {
	if f.ListElectionsFn == nil {
		return locks.Page[locks.ElectionState]{}, errUnexpectedCall
	}
	return f.ListElectionsFn(ctx, req)
}
