package handlers

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// Locks is what the HTTP layer needs from the lock domain. *locks.Service
// satisfies it; tests use a fake.
type Locks interface {
	RWLocks
	Acquire(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error)
	Renew(ctx context.Context, name, token string, ttl time.Duration) (locks.Lease, error)
	Release(ctx context.Context, name, token string) (locks.Released, error)
	ForceRelease(ctx context.Context, name string) (bool, error)
	Inspect(ctx context.Context, name, token string) (locks.LockState, error)
	// Hold acquires a lease that the service renews until Close.
	Hold(ctx context.Context, name string, req locks.AcquireRequest) (*locks.Hold, error)
	// Ready checks that the store answers and runs scripts.
	Ready(ctx context.Context) error

	Semaphores
	Elections
	Listings
	Watches
}

// Watches is what the HTTP layer needs to watch a name without holding it.
// *locks.Service satisfies it; Locks embeds it.
type Watches interface {
	// Watch streams the public state of name of kind, then its changes.
	Watch(ctx context.Context, kind, name, lastID string) (*locks.Watch, error)
}

// Elections is what the HTTP layer needs of elections. *locks.Service
// satisfies it; Locks embeds it.
type Elections interface {
	Campaign(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error)
	// HoldElection campaigns and leads until Close.
	HoldElection(ctx context.Context, name string, req locks.AcquireRequest) (*locks.Hold, error)
	Proclaim(ctx context.Context, name, token, value string) (locks.Lease, error)
	RenewElection(ctx context.Context, name, token string, ttl time.Duration) (locks.Lease, error)
	Resign(ctx context.Context, name, token string) (locks.Released, error)
	ForceResign(ctx context.Context, name string) (bool, error)
	InspectElection(ctx context.Context, name, token string) (locks.ElectionState, error)
}

// Listings is what the HTTP layer needs to list what is held, one page at
// a time. *locks.Service satisfies it; Locks embeds it.
type Listings interface {
	ListLocks(ctx context.Context, req locks.ListRequest) (locks.Page[locks.LockState], error)
	ListRWLocks(ctx context.Context, req locks.ListRequest) (locks.Page[locks.RWState], error)
	ListSemaphores(ctx context.Context, req locks.ListRequest) (locks.Page[locks.SemaphoreState], error)
	ListElections(ctx context.Context, req locks.ListRequest) (locks.Page[locks.ElectionState], error)
	ListLost(ctx context.Context, kind string, req locks.ListRequest) (locks.Page[locks.LostState], error)
}

// RWLocks is what the HTTP layer needs of read/write locks. Locks embeds it.
type RWLocks interface {
	AcquireRW(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error)
	RenewRW(ctx context.Context, name, token string, mode locks.RWMode, ttl time.Duration) (locks.Lease, error)
	ReleaseRW(ctx context.Context, name, token string, mode locks.RWMode) (locks.Released, error)
	ForceReleaseRW(ctx context.Context, name string) (bool, error)
	InspectRW(ctx context.Context, name, token string) (locks.RWState, error)
	// HoldRW acquires a read or write lease that the service renews until Close.
	HoldRW(ctx context.Context, name string, req locks.AcquireRequest) (*locks.Hold, error)
}

// RateLimits is what the HTTP layer needs from the rate-limit domain.
// *ratelimit.Service satisfies it; tests use a fake.
type RateLimits interface {
	Check(ctx context.Context, req ratelimit.Request) (ratelimit.Decision, error)
	// Gate decides a request to the gate under the named policy, its key
	// and cost taken from src; it returns the policy's deny status too.
	Gate(ctx context.Context, policy string, src ratelimit.Source) (ratelimit.Decision, int, error)
	// ActivePolicies returns the policy set decisions use now.
	ActivePolicies() ratelimit.PolicySet
	// PolicyStats returns this instance's decision counts of the tenant
	// ctx acts for, by policy.
	PolicyStats(ctx context.Context) map[string]ratelimit.PolicyStats
	// TopDenied returns the keys of a policy denied most on this instance
	// for the tenant ctx acts for.
	TopDenied(ctx context.Context, policy string, n int) (ratelimit.TopKeys, error)
	// ResetKey deletes the counters of one key under a policy (admin).
	ResetKey(ctx context.Context, policy, key string) (int64, error)
}

// services are the domains the handlers call.
type services struct {
	Locks
	RateLimits
}

// Semaphores is what the HTTP layer needs for semaphores. *locks.Service
// satisfies it; Locks embeds it.
type Semaphores interface {
	AcquireSemaphore(ctx context.Context, name string, req locks.SemaphoreRequest) (locks.SemaphoreLease, error)
	RenewSemaphore(ctx context.Context, name, token string, ttl time.Duration) (locks.SemaphoreLease, error)
	ReleaseSemaphore(ctx context.Context, name, token string) (int64, error)
	ForceReleaseSemaphore(ctx context.Context, name string) (int64, error)
	SetSemaphorePermits(ctx context.Context, name string, permits int64) (locks.SemaphoreState, error)
	InspectSemaphore(ctx context.Context, name, token string) (locks.SemaphoreState, error)
	// HoldSemaphore takes permits as a lease that the service renews until Close.
	HoldSemaphore(ctx context.Context, name string, req locks.SemaphoreRequest) (*locks.Hold, error)
}
