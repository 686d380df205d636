package handlers

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/service/auth"
	"github.com/latchkey/latchkey/service/locks"
)

// The lease quota of the primitives with many holders (read/write locks and
// semaphores): each lease is one place, named by its primitive, name and
// token, so every reader and every permit lease counts. A lease whose token
// the service chooses takes a pending place while it is acquired, swapped
// for its token's once granted, so the tenant never holds more leases than
// its quota; a token the client sends takes its own place at once (a
// re-entry keeps the place it has). Places end as the exclusive lock's do
// (see quotaLocks); a force-release leaves the evicted leases' places to
// expire with their TTL, so the tenant may be refused early until then,
// never granted one too many.

// holderMember names the place of the lease of token on name of kind.
func holderMember(kind, name, token string) string { return kind + ":" + name + ":" + token }

// acquireHolder runs acquire, which takes a lease of kind on name and
// returns its token and its place's TTL, with the tenant's waiter and lease
// places taken around it as the quotas ask. It returns the lease's place
// ("" when the lease quota does not apply) and the errors of reserving and
// of acquire.
func (q *quotaLocks) acquireHolder(ctx context.Context, kind, name string, req locks.AcquireRequest,
	acquire func(context.Context) (string, time.Duration, error)) (string, error) {
	t := tenantOf(ctx)
	if t == nil || (t.Quotas.Leases <= 0 && t.Quotas.Waiters <= 0) {
		_, _, err := acquire(ctx)
		return "", err
	}
	done, err := q.waiter(ctx, t, req.Wait)
	if err != nil {
		return "", err
	}
	defer done()
	if t.Quotas.Leases <= 0 {
		_, _, err := acquire(ctx)
		return "", err
	}
	place := holderMember(kind, name, req.Token)
	if req.Token == "" {
		place = holderMember(kind, name, "pending-"+locks.NewToken())
	}
	created, err := q.q.Reserve(ctx, auth.QuotaLeases, place, provisional(req), t.Quotas.Leases)
	if err != nil {
		return "", err
	}
	token, ttl, err := acquire(ctx)
	if err != nil {
		if created {
			q.giveBack(ctx, auth.QuotaLeases, place)
		}
		return "", err
	}
	member := holderMember(kind, name, token)
	if member != place {
		// The pending place becomes the token's: one more for a moment,
		// the pending one given back at once.
		_, _ = q.q.Reserve(ctx, auth.QuotaLeases, member, ttl, t.Quotas.Leases+1)
		q.giveBack(ctx, auth.QuotaLeases, place)
	} else {
		_, _ = q.q.Reserve(ctx, auth.QuotaLeases, member, ttl, t.Quotas.Leases)
	}
	return member, nil
}

// holdHolder runs hold, which takes a connection-held lease of kind on
// name, as acquireHolder runs an acquire, and keeps the lease's place while
// the hold's request lasts. Returns the errors of acquireHolder.
func (q *quotaLocks) holdHolder(ctx context.Context, kind, name string, req locks.AcquireRequest,
	hold func(context.Context) (*locks.Hold, error)) (*locks.Hold, error) {
	var h *locks.Hold
	member, err := q.acquireHolder(ctx, kind, name, req, func(ctx context.Context) (string, time.Duration, error) {
		var err error
		if h, err = hold(ctx); err != nil {
			return "", 0, err
		}
		return h.Lease().Token, 2*h.Lease().TTL + time.Second, nil
	})
	if err == nil {
		q.holdPlace(ctx, member, h.Lease().TTL)
	}
	return h, err
}

// leaseQuota reports the tenant ctx acts for when its lease quota applies.
func leaseQuota(ctx context.Context) (*auth.Tenant, bool) {
	t := tenantOf(ctx)
	return t, t != nil && t.Quotas.Leases > 0
}

// holdPlace keeps the place of a hold's lease while the hold's request
// lasts (see keepPlace); member "" keeps none.
func (q *quotaLocks) holdPlace(ctx context.Context, member string, ttl time.Duration) {
	if t, ok := leaseQuota(ctx); ok && member != "" {
		go q.keepPlace(ctx, member, ttl, t.Quotas.Leases)
	}
}

// AcquireRW counts the tenant's waiter and lease around locks.Service.AcquireRW.
func (q *quotaLocks) AcquireRW(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
	var lease locks.Lease
	_, err := q.acquireHolder(ctx, "rwlocks", name, req, func(ctx context.Context) (string, time.Duration, error) {
		var err error
		lease, err = q.Locks.AcquireRW(ctx, name, req)
		return lease.Token, placeTTL(lease), err
	})
	return lease, err
}

// RenewRW moves the lease's place's expiry with the lease.
func (q *quotaLocks) RenewRW(ctx context.Context, name, token string, mode locks.RWMode, ttl time.Duration) (locks.Lease, error) {
	lease, err := q.Locks.RenewRW(ctx, name, token, mode, ttl)
	if t, ok := leaseQuota(ctx); err == nil && ok {
		_, _ = q.q.Reserve(ctx, auth.QuotaLeases, holderMember("rwlocks", name, token), placeTTL(lease), t.Quotas.Leases)
	}
	return lease, err
}

// ReleaseRW gives the place back once the token holds nothing of the lock
// (after a downgrade it may still hold the read lease).
func (q *quotaLocks) ReleaseRW(ctx context.Context, name, token string, mode locks.RWMode) (locks.Released, error) {
	rel, err := q.Locks.ReleaseRW(ctx, name, token, mode)
	if _, ok := leaseQuota(ctx); err == nil && ok && rel.HoldCount == 0 {
		if st, ierr := q.Locks.InspectRW(ctx, name, token); ierr == nil && !st.Owned {
			q.giveBack(ctx, auth.QuotaLeases, holderMember("rwlocks", name, token))
		}
	}
	return rel, err
}

// HoldRW counts the tenant's waiter and lease around locks.Service.HoldRW;
// the lease's place is given back when the hold's request ends.
func (q *quotaLocks) HoldRW(ctx context.Context, name string, req locks.AcquireRequest) (*locks.Hold, error) {
	return q.holdHolder(ctx, "rwlocks", name, req, func(ctx context.Context) (*locks.Hold, error) {
		return q.Locks.HoldRW(ctx, name, req)
	})
}

// semaphorePlaceTTL is how long a permit lease's place lasts after a grant
// or renewal.
func semaphorePlaceTTL(l locks.SemaphoreLease) time.Duration {
	return placeTTL(locks.Lease{TTL: l.TTL, Keepalive: l.Keepalive})
}

// AcquireSemaphore counts the tenant's waiter and lease around
// locks.Service.AcquireSemaphore.
func (q *quotaLocks) AcquireSemaphore(ctx context.Context, name string, req locks.SemaphoreRequest) (locks.SemaphoreLease, error) {
	var lease locks.SemaphoreLease
	_, err := q.acquireHolder(ctx, "semaphores", name, req.AcquireRequest, func(ctx context.Context) (string, time.Duration, error) {
		var err error
		lease, err = q.Locks.AcquireSemaphore(ctx, name, req)
		return lease.Token, semaphorePlaceTTL(lease), err
	})
	return lease, err
}

// RenewSemaphore moves the lease's place's expiry with the lease.
func (q *quotaLocks) RenewSemaphore(ctx context.Context, name, token string, ttl time.Duration) (locks.SemaphoreLease, error) {
	lease, err := q.Locks.RenewSemaphore(ctx, name, token, ttl)
	if t, ok := leaseQuota(ctx); err == nil && ok {
		_, _ = q.q.Reserve(ctx, auth.QuotaLeases, holderMember("semaphores", name, token), semaphorePlaceTTL(lease), t.Quotas.Leases)
	}
	return lease, err
}

// ReleaseSemaphore gives the lease's place back with its permits.
func (q *quotaLocks) ReleaseSemaphore(ctx context.Context, name, token string) (int64, error) {
	n, err := q.Locks.ReleaseSemaphore(ctx, name, token)
	if _, ok := leaseQuota(ctx); err == nil && ok {
		q.giveBack(ctx, auth.QuotaLeases, holderMember("semaphores", name, token))
	}
	return n, err
}

// HoldSemaphore counts the tenant's waiter and lease around
// locks.Service.HoldSemaphore; the lease's place is given back when the
// hold's request ends.
func (q *quotaLocks) HoldSemaphore(ctx context.Context, name string, req locks.SemaphoreRequest) (*locks.Hold, error) {
	return q.holdHolder(ctx, "semaphores", name, req.AcquireRequest, func(ctx context.Context) (*locks.Hold, error) {
		return q.Locks.HoldSemaphore(ctx, name, req)
	})
}
