package auth

import (
	"context"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
)

// QuotaKind names a quota counted in Redis.
type QuotaKind string

// The quotas counted in Redis, one sorted set per tenant each.
const (
	QuotaLeases  QuotaKind = "leases"
	QuotaWaiters QuotaKind = "waiters"
)

// QuotaError reports a tenant at one of its quotas. It wraps
// store.ErrConflict.
type QuotaError struct {
	Quota      string // leases, waiters or requests_per_second
	Limit      int64
	RetryAfter time.Duration // when a place may be free again
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("service: tenant quota of %d %s reached", e.Limit, e.Quota)
}

// Unwrap makes errors.Is(err, store.ErrConflict) true.
func (e *QuotaError) Unwrap() error { return store.ErrConflict }

var (
	quotaReserveScript = store.NewScript("quota_reserve", lua.QuotaReserve)
	quotaReleaseScript = store.NewScript("quota_release", lua.QuotaRelease)
)

// Counter counts each tenant's leases and waiters in Redis, one sorted set
// per tenant and kind under the tenant's key prefix, so every instance
// counts against the same places.
type Counter struct {
	st     *store.Store
	prefix string
}

// NewCounter returns the quota counter on st and registers its scripts.
func NewCounter(st *store.Store) *Counter {
	st.Register(quotaReserveScript, quotaReleaseScript)
	return &Counter{st: st, prefix: st.Config().KeyPrefix}
}

// QuotaKey names the sorted set of a tenant's places of kind under the key
// prefix.
func QuotaKey(prefix, tenant string, kind QuotaKind) string {
	return store.TenantPrefix(prefix, tenant) + "quota:" + string(kind)
}

// Reserve takes (or, when member has one, keeps) a place of kind for the
// tenant ctx acts for, lasting ttl unless reserved again. It is one script:
// however many instances reserve at once, no more than limit members hold a
// place. It reports whether member had no place before. Returns a
// *QuotaError when the quota is full, and errors wrapping
// store.ErrUnavailable when Redis does not answer.
func (q *Counter) Reserve(ctx context.Context, kind QuotaKind, member string, ttl time.Duration, limit int64) (bool, error) {
	key := QuotaKey(q.prefix, store.TenantOf(ctx), kind)
	res, err := q.st.Run(ctx, quotaReserveScript, []string{key},
		member,                     // ARGV[1] member
		max(ttl.Milliseconds(), 1), // ARGV[2] how long the place lasts, ms
		limit,                      // ARGV[3] quota
	)
	if err != nil {
		return false, err
	}
	v, ok := res.([]any)
	if !ok || len(v) != 2 {
		return false, fmt.Errorf("quota_reserve: unexpected reply %v", res)
	}
	granted, _ := v[0].(int64)
	n, _ := v[1].(int64)
	if granted != 1 {
		return false, &QuotaError{Quota: string(kind), Limit: limit, RetryAfter: time.Duration(n) * time.Millisecond}
	}
	return n == 1, nil
}

// Release gives back member's place of kind, if it has one. Returns errors
// wrapping store.ErrUnavailable when Redis does not answer.
func (q *Counter) Release(ctx context.Context, kind QuotaKind, member string) error {
	key := QuotaKey(q.prefix, store.TenantOf(ctx), kind)
	_, err := q.st.Run(ctx, quotaReleaseScript, []string{key}, member) // ARGV[1] member
	return err
}
