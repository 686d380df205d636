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

// Check answers with CheckFn. Like *ratelimit.Service, it first completes
// a request with a source under the policy PolicyFn gives, with the
// domain's own Policy.Complete: CheckFn sees the key and cost the service
// would decide, and a request whose source gives none never reaches it.
func (f *fakeService) Check(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error) {
	if req.From != nil && req.Inline == nil {
		pol, err := f.Policy(req.Policy)
		if err != nil {
			return ratelimit.Decision{}, err
		}
		if req, err = pol.Complete(req); err != nil {
			return ratelimit.Decision{}, err
		}
	}
	f.record("Check")
	if f.CheckFn == nil {
		return ratelimit.Decision{}, errUnexpectedCall
	}
	return f.CheckFn(ctx, req)
}

// Gate is Check of the request src completes under the policy PolicyFn
// gives, as *ratelimit.Service decides it, with the policy's deny status.
func (f *fakeService) Gate(ctx context.Context, policy string, src ratelimit.Source) (ratelimit.Decision, int, error) {
	pol, err := f.Policy(policy)
	if err != nil {
		return ratelimit.Decision{}, 0, err
	}
	req, err := pol.Complete(ratelimit.Request{Policy: policy, From: src})
	if err != nil {
		return ratelimit.Decision{}, 0, err
	}
	d, err := f.Check(ctx, req)
	return d, pol.DenyStatus, err
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
