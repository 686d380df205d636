package handlers

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/service"
)

// Service is what the HTTP layer needs from the domain. *service.Service
// satisfies it; tests use a fake.
type Service interface {
	Acquire(ctx context.Context, name string, req service.AcquireRequest) (service.Lease, error)
	Renew(ctx context.Context, name, token string, ttl time.Duration) (service.Lease, error)
	Release(ctx context.Context, name, token string) (service.Released, error)
	ForceRelease(ctx context.Context, name string) (bool, error)
	Inspect(ctx context.Context, name, token string) (service.LockState, error)
	Ready(ctx context.Context) error

	RateLimitPolicy(name string) (service.Policy, error)
	CheckRateLimit(ctx context.Context, req service.RateLimitRequest) (service.Decision, error)
	// Hold acquires a lease that the service renews until Close.
	Hold(ctx context.Context, name string, req service.AcquireRequest) (*service.Hold, error)
}
