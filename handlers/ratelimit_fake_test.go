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
