package handlers_test

import (
	"context"

	"github.com/latchkey/latchkey/service"
)

func (f *fakeService) RateLimitPolicy(name string) (service.Policy, error) {
	f.record("RateLimitPolicy")
	if f.RateLimitPolicyFn == nil {
		return service.Policy{}, errUnexpectedCall
	}
	return f.RateLimitPolicyFn(name)
}

func (f *fakeService) CheckRateLimit(ctx context.Context, req service.RateLimitRequest) (service.Decision, error) {
	f.record("CheckRateLimit")
	if f.CheckRateLimitFn == nil {
		return service.Decision{}, errUnexpectedCall
	}
	return f.CheckRateLimitFn(ctx, req)
}
