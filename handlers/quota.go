package handlers

import (
	"context"
	"time"

	"github.com/latchkey/latchkey/service/auth"
	"github.com/latchkey/latchkey/service/locks"
)

// quotaLocks counts the leases and waiters of a tenant with quotas (see
// auth.Counter) around the lock service's calls: a lease takes its place
// before it is acquired and gives it back when released; a waiting acquire
// takes a waiter's place for as long as it waits. Requests of no tenant, or
// of a tenant without these quotas, go straight through.
//
// How exact: a tenant never has more places than its quota, on any number
// of instances (each place is taken by one script), and a lease is granted
// only with a place. A place is given back when its lease is released or
// force-released, when its hold ends, or when it expires with the lease (its
// expiry follows every acquire and renewal through Latchkey, and is the
// max-hold deadline for keep-alive leases): so a keep-alive lease lost
// before its max-hold deadline keeps its place until then, and the tenant
// may be refused a lease that early, never granted one too many.
type quotaLocks struct {
	Locks
	q QuotaCounter
}

func withQuotas(lk Locks, q QuotaCounter) Locks {
	if q == nil {
		return lk
	}
	return &quotaLocks{Locks: lk, q: q}
}

// leaseMember names a lease in its tenant's lease quota: the primitive and
// the name. An exclusive lock has one lease at a time, so a re-entry, a
// renewal, a release and a force-release all name the same place.
func leaseMember(kind, name string) string { return kind + ":" + name }

// placeTTL is how long a lease's place lasts after a grant or renewal.
func placeTTL(l locks.Lease) time.Duration {
	if l.Keepalive != nil {
		return time.Until(l.Keepalive.Until) + time.Second
	}
	return l.TTL + time.Second
}

// provisional is how long a place taken before an acquire lasts: past the
// acquire's own bound, in case the instance dies before it is set right.
func provisional(req locks.AcquireRequest) time.Duration {
	return req.Wait + max(req.TTL, req.MaxHold) + time.Minute
}

// waiter takes a waiter's place for a waiting request, and returns the
// function that gives it back.
func (q *quotaLocks) waiter(ctx context.Context, t *auth.Tenant, wait time.Duration) (func(), error) {
	if wait <= 0 || t.Quotas.Waiters <= 0 {
		return func() {}, nil
	}
	member := "waiter:" + locks.NewToken()
	if _, err := q.q.Reserve(ctx, auth.QuotaWaiters, member, wait+time.Minute, t.Quotas.Waiters); err != nil {
		return nil, err
	}
	return func() { q.giveBack(ctx, auth.QuotaWaiters, member) }, nil
}

// giveBack releases member's place, even when ctx has ended.
func (q *quotaLocks) giveBack(ctx context.Context, kind auth.QuotaKind, member string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = q.q.Release(ctx, kind, member) // a place not given back expires
}

// reserveLease takes the place of the lease req asks for, and returns
// whether it is new.
func (q *quotaLocks) reserveLease(ctx context.Context, t *auth.Tenant, kind, name string, req *locks.AcquireRequest) (string, bool, error) {
	member := leaseMember(kind, name)
	created, err := q.q.Reserve(ctx, auth.QuotaLeases, member, provisional(*req), t.Quotas.Leases)
	return member, created, err
}

// Acquire counts the tenant's waiter and lease around locks.Service.Acquire.
func (q *quotaLocks) Acquire(ctx context.Context, name string, req locks.AcquireRequest) (locks.Lease, error) {
	t := tenantOf(ctx)
	if t == nil || (t.Quotas.Leases <= 0 && t.Quotas.Waiters <= 0) {
		return q.Locks.Acquire(ctx, name, req)
	}
	done, err := q.waiter(ctx, t, req.Wait)
	if err != nil {
		return locks.Lease{}, err
	}
	defer done()
	if t.Quotas.Leases <= 0 {
		return q.Locks.Acquire(ctx, name, req)
	}
	member, created, err := q.reserveLease(ctx, t, "locks", name, &req)
	if err != nil {
		return locks.Lease{}, err
	}
	lease, err := q.Locks.Acquire(ctx, name, req)
	if err != nil {
		if created {
			q.giveBack(ctx, auth.QuotaLeases, member)
		}
		return lease, err
	}
	_, _ = q.q.Reserve(ctx, auth.QuotaLeases, member, placeTTL(lease), t.Quotas.Leases)
	return lease, nil
}

// Renew moves the lease's place's expiry with the lease.
func (q *quotaLocks) Renew(ctx context.Context, name, token string, ttl time.Duration) (locks.Lease, error) {
	lease, err := q.Locks.Renew(ctx, name, token, ttl)
	if t := tenantOf(ctx); err == nil && t != nil && t.Quotas.Leases > 0 {
		_, _ = q.q.Reserve(ctx, auth.QuotaLeases, leaseMember("locks", name), placeTTL(lease), t.Quotas.Leases)
	}
	return lease, err
}

// Release gives the lease's place back with its last hold.
func (q *quotaLocks) Release(ctx context.Context, name, token string) (locks.Released, error) {
	rel, err := q.Locks.Release(ctx, name, token)
	if t := tenantOf(ctx); err == nil && rel.HoldCount == 0 && t != nil && t.Quotas.Leases > 0 {
		q.giveBack(ctx, auth.QuotaLeases, leaseMember("locks", name))
	}
	return rel, err
}

// keepPlace keeps a hold's place while its request lasts (the hold renews
// its lease every ttl/3; its place lasts two TTLs past each refresh, so an
// instance that dies frees it soon after), and gives it back at the end.
func (q *quotaLocks) keepPlace(ctx context.Context, member string, ttl time.Duration, limit int64) {
	tick := time.NewTicker(ttl)
	defer tick.Stop()
	for {
		_, _ = q.q.Reserve(ctx, auth.QuotaLeases, member, 2*ttl+time.Second, limit)
		select {
		case <-ctx.Done():
			q.giveBack(ctx, auth.QuotaLeases, member)
			return
		case <-tick.C:
		}
	}
}

// ForceRelease gives the lock's place back with its lease.
func (q *quotaLocks) ForceRelease(ctx context.Context, name string) (bool, error) {
	removed, err := q.Locks.ForceRelease(ctx, name)
	if t := tenantOf(ctx); err == nil && t != nil && t.Quotas.Leases > 0 {
		q.giveBack(ctx, auth.QuotaLeases, leaseMember("locks", name))
	}
	return removed, err
}

// Hold counts the tenant's waiter and lease around locks.Service.Hold; the
// lease's place is given back when the hold's request ends (ctx is done).
func (q *quotaLocks) Hold(ctx context.Context, name string, req locks.AcquireRequest) (*locks.Hold, error) {
	t := tenantOf(ctx)
	if t == nil || (t.Quotas.Leases <= 0 && t.Quotas.Waiters <= 0) {
		return q.Locks.Hold(ctx, name, req)
	}
	done, err := q.waiter(ctx, t, req.Wait)
	if err != nil {
		return nil, err
	}
	defer done()
	if t.Quotas.Leases <= 0 {
		return q.Locks.Hold(ctx, name, req)
	}
	member, created, err := q.reserveLease(ctx, t, "locks", name, &req)
	if err != nil {
		return nil, err
	}
	h, err := q.Locks.Hold(ctx, name, req)
	if err != nil {
		if created {
			q.giveBack(ctx, auth.QuotaLeases, member)
		}
		return h, err
	}
	go q.keepPlace(ctx, member, h.Lease().TTL, t.Quotas.Leases)
	return h, nil
}
