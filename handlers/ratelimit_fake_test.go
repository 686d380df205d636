package handlers_test

import (
	"context"

	"github.com/latchkey/latchkey/service/ratelimit"
)

func (f *fakeService) RateLimitPolicy(name string) (ratelimit.Policy, error) {
	f.record("RateLimitPolicy")
	if f.RateLimitPolicyFn == nil {
		return ratelimit.Policy{}, errUnexpectedCall
	}
	return f.RateLimitPolicyFn(name)
}

func (f *fakeService) CheckRateLimit(ctx context.Context, req ratelimit.RateLimitRequest) (ratelimit.Decision, error) {
	f.record("CheckRateLimit")
	if f.CheckRateLimitFn == nil {
		return ratelimit.Decision{}, errUnexpectedCall
	}
	return f.CheckRateLimitFn(ctx, req)
}
