package handlers_test

import (
	"context"

	"github.com/latchkey/latchkey/service/ratelimit"
)

func (f *fakeService) Policy(name string) (ratelimit.Policy, error) {
	f.record("Policy")
	if f.PolicyFn == nil {
		return ratelimit.Policy{}, errUnexpectedCall
	}
	return f.PolicyFn(name)
}

func (f *fakeService) Check(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	f.record("Check")
	if f.CheckFn == nil {
		return ratelimit.Decision{}, errUnexpectedCall
	}
	return f.CheckFn(ctx, req)
}

// ActivePolicies answers an empty set: no handler test reads it through the
// fake.
func (f *fakeService) ActivePolicies() ratelimit.PolicySet {
	f.record("ActivePolicies")
	return ratelimit.PolicySet{}
}

// PolicyStats answers no counts: no handler test reads them through the
// fake.
func (f *fakeService) PolicyStats(ctx context.Context) map[string]ratelimit.PolicyStats {
	f.record("PolicyStats")
	return nil
}

func (f *fakeService) TopDenied(ctx context.Context, policy string, n int) (ratelimit.TopKeys, error) {
	f.record("TopDenied")
	if f.TopDeniedFn == nil {
		return ratelimit.TopKeys{}, errUnexpectedCall
	}
	return f.TopDeniedFn(ctx, policy, n)
}

func (f *fakeService) ResetKey(ctx context.Context, policy, key string) (int64, error) {
	f.record("ResetKey")
	if f.ResetKeyFn == nil {
		return 0, errUnexpectedCall
	}
	return f.ResetKeyFn(ctx, policy, key)
}
