package locks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
)

// Tenant quotas: a tenant (store.TenantOf) may be limited to so many leases
// held and so many acquires waiting at once (Config.Quotas). Each is a
// sorted set of places under the tenant's prefix (LeaseQuotaKey,
// WaiterQuotaKey), member -> when the place ends on Redis's clock; a place
// whose end has passed is free.
//
// A lease's place belongs to the lease, not to its name: its member is the
// primitive, the token and the name (leasePlace), so a waiter never shares
// its holder's place. Every grant of every primitive goes through
// attemptPlaced (the shared acquire machine's attempt calls it, acquire.go),
// which takes the place before the acquire script runs and settles it after:
//   - granted: the place ends when the lease does (its TTL, or its max-hold
//     deadline when kept alive), and moves with each renewal (Renew, the
//     renewals of a hold); a release of the lease's last hold, a hold's end
//     and a force-release give it back;
//   - refused: a place the attempt took is given back, so the set is as it
//     was, and a place the lease already had (a re-entry) is left as it was;
//   - the reply lost: the script may have granted, so the place stays until
//     the end of the longest lease the attempt could have been granted.
//
// A tenant at its quota is refused without an attempt, unless the request
// waits: a waiter then waits without a place, takes one once granted (the
// release that let it in has given its own back by then, unless another
// acquire took it), and when none is free the grant is released and the
// waiter refused. So a lease is never handed out without a place of its
// own: the tenant is never told of more leases than its quota, on any
// number of instances. A keep-alive lease lost before its max-hold deadline
// keeps its place until then, so a tenant may be refused a little early,
// never granted one too many. A renewal's place is moved just after the
// renewal script: a lease renewed within one round trip of its end may see
// its place end first.
//
// The place and the grant are two scripts, not one: on a Redis Cluster the
// tenant's quota key and the lock's keys are in different slots, and one
// protocol serves both. Taking the place first is what keeps the count
// exact; the price is that a refused acquire holds a place for one round
// trip, during which the tenant's other acquires may be refused early.
// When Redis does not answer the quota script, the acquire is not tried
// (ErrUnavailable).
//
// A waiter's place is taken once for the whole wait and lasts as long as the
// wait, so a refusal's Retry-After is the first waiter's end.

// Quota is what a tenant may have of the lock service at once. A zero field
// counts nothing.
type Quota struct {
	Leases  int64 // leases held, of every primitive
	Waiters int64 // acquires waiting
}

// Kinds of places, as the quota errors name them.
const (
	quotaLeases  = "leases"
	quotaWaiters = "waiters"
)

var (
	quotaTakeScript    = store.NewScript("quota_take", lua.Source("quota_take"))
	quotaSetScript     = store.NewScript("quota_set", lua.Source("quota_set"))
	quotaReleaseScript = store.NewScript("quota_release", lua.Source("quota_release"))
)

// LeaseQuotaKey names the sorted set of tenant's lease places under prefix.
func LeaseQuotaKey(prefix, tenant string) string { return quotaKey(prefix, tenant, quotaLeases) }

// WaiterQuotaKey names the sorted set of tenant's waiter places under prefix.
func WaiterQuotaKey(prefix, tenant string) string { return quotaKey(prefix, tenant, quotaWaiters) }

func quotaKey(prefix, tenant, quota string) string {
	return store.TenantPrefix(prefix, tenant) + "quota:" + quota
}

// quotaOf is the quota of the tenant ctx acts for; none without a tenant.
func (s *Service) quotaOf(ctx context.Context) Quota {
	t := store.TenantOf(ctx)
	if t == "" || s.cfg.Quotas == nil {
		return Quota{}
	}
	return s.cfg.Quotas(t)
}

// placeLabel names a primitive in its leases' places.
func placeLabel(k kind) string {
	switch k {
	case kindRW:
		return "rwlocks"
	case kindSem:
		return "semaphores"
	case kindEl:
		return "elections"
	}
	return "locks"
}

// leasePlace is the member of token's lease on k in its tenant's lease
// quota: "<label>:<token>:<name>" (tokens hold no ':', names may).
func leasePlace(k lockKeys, token string) string {
	return placeLabel(k.kind) + ":" + token + ":" + k.name
}

// leaseLasts is placeLasts of a granted or renewed lease.
func leaseLasts(l Lease) time.Duration {
	return placeLasts(l.TTL, l.Keepalive, l.ExpiresAt.Add(-l.TTL).UnixMilli())
}

// placeLasts is how long a lease's place must last from its grant or
// renewal: its TTL, or until its max-hold deadline when kept alive (the
// renewer extends it without telling anyone). nowMS is the Redis clock of
// the reply.
func placeLasts(ttl time.Duration, ka *Keepalive, nowMS int64) time.Duration {
	if ka != nil {
		return ka.Until.Sub(time.UnixMilli(nowMS))
	}
	return ttl
}

// grantBound is the longest a lease that req may be granted can last from
// now: its TTL or max-hold, plus the longest the script may take to run.
func (s *Service) grantBound(req AcquireRequest) time.Duration {
	if req.Keepalive {
		return req.MaxHold + s.opTimeout
	}
	return req.TTL + s.opTimeout
}

// take takes member's place in the tenant's quota of kind (or finds the one
// it has), lasting d unless set again, and reports whether it is new.
// Returns a *store.QuotaError when the quota is full, or an error wrapping
// ErrUnavailable.
func (s *Service) take(ctx context.Context, quota, member string, d time.Duration, limit int64) (bool, error) {
	res, err := s.st.Run(ctx, quotaTakeScript, []string{quotaKey(s.prefix, store.TenantOf(ctx), quota)},
		member,                   // ARGV[1] member
		max(d.Milliseconds(), 1), // ARGV[2] how long a new place lasts, ms
		limit,                    // ARGV[3] quota
	)
	if err != nil {
		return false, err
	}
	v, err := store.Int64s("quota_take", res, 2)
	if err != nil {
		return false, err
	}
	if v[0] != 1 {
		return false, &store.QuotaError{Quota: quota, Limit: limit, RetryAfter: time.Duration(v[1]) * time.Millisecond}
	}
	return v[1] == 1, nil
}

// setPlace makes the place of token's lease on k end d from now, if it has
// one. A failure is not reported: the place then ends as it was set before,
// which a renewal sets again.
func (s *Service) setPlace(ctx context.Context, k lockKeys, token string, d time.Duration) {
	if s.quotaOf(ctx).Leases <= 0 {
		return
	}
	_, _ = s.st.Run(ctx, quotaSetScript, []string{LeaseQuotaKey(s.prefix, store.TenantOf(ctx))},
		leasePlace(k, token),     // ARGV[1] member
		max(d.Milliseconds(), 1), // ARGV[2] how long the place lasts from now, ms
	)
}

// giveBackPlace gives back member's place of quota, even when ctx has ended.
// A failure is not reported: the place ends by itself.
func (s *Service) giveBackPlace(ctx context.Context, quota string, args ...any) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opTimeout)
	defer cancel()
	_, _ = s.st.Run(ctx, quotaReleaseScript, []string{quotaKey(s.prefix, store.TenantOf(ctx), quota)}, args...)
}

// dropPlace gives back the place of token's lease on k: the lease is gone.
func (s *Service) dropPlace(ctx context.Context, k lockKeys, token string) {
	if s.quotaOf(ctx).Leases > 0 {
		s.giveBackPlace(ctx, quotaLeases, leasePlace(k, token)) // ARGV[1] member
	}
}

// evictPlaces gives back the places of every lease on k: a force-release
// removed them all.
func (s *Service) evictPlaces(ctx context.Context, k lockKeys) {
	if s.quotaOf(ctx).Leases > 0 {
		s.giveBackPlace(ctx, quotaLeases,
			placeLabel(k.kind), // ARGV[1] the primitive's label
			k.name,             // ARGV[2] the name
		)
	}
}

// grantTry is one run of a primitive's acquire script as attemptPlaced
// sees it: whether it granted, and how long the lease's place must last.
type grantTry func() (granted bool, lasts time.Duration, err error)

// attemptPlaced runs try, an attempt that may grant token a lease on k
// lasting up to bound, with the lease's place in its tenant's lease quota
// of limit (> 0) places (see the comment at the top of this file). waiting says the attempt
// registers a waiter when not granted: a tenant at its quota then still
// waits, and a grant without a place is undone (undo releases it) and
// refused. Returns try's error, or a *store.QuotaError when the tenant is
// at its lease quota, or an error wrapping ErrUnavailable.
func (s *Service) attemptPlaced(ctx context.Context, k lockKeys, token string, limit int64, bound time.Duration, waiting bool,
	try grantTry, undo func(context.Context)) error {
	member := leasePlace(k, token)
	created, err := s.take(ctx, quotaLeases, member, bound, limit)
	if full := (*store.QuotaError)(nil); errors.As(err, &full) && waiting {
		granted, lasts, err := try()
		if err != nil || !granted {
			return err
		}
		// A release that let this waiter in gives its place back just
		// after waking it: the place may be free now.
		if _, err := s.take(ctx, quotaLeases, member, bound, limit); err == nil {
			s.setPlace(ctx, k, token, lasts)
			return nil
		}
		undo(context.WithoutCancel(ctx))
		return full
	}
	if err != nil {
		return err
	}
	granted, lasts, err := try()
	switch {
	case granted:
		s.setPlace(ctx, k, token, lasts)
	case created && (err == nil || store.IsServerError(err)):
		s.giveBackPlace(ctx, quotaLeases, member)
	}
	return err
}

// waiterPlace takes a waiter's place for an acquire that waits up to wait,
// and returns the function that gives it back. Returns a *store.QuotaError
// when the tenant is at its waiter quota, or an error wrapping
// ErrUnavailable.
func (s *Service) waiterPlace(ctx context.Context, wait time.Duration) (func(), error) {
	limit := s.quotaOf(ctx).Waiters
	if limit <= 0 || wait <= 0 {
		return func() {}, nil
	}
	member := "waiter:" + NewToken()
	if _, err := s.take(ctx, quotaWaiters, member, wait, limit); err != nil {
		return nil, fmt.Errorf("wait: %w", err)
	}
	return func() { s.giveBackPlace(ctx, quotaWaiters, member) }, nil
}

// released gives back the place of token's lease on k after a release that
// left holds holds, when the lease is gone: no hold remains (and, on a
// read/write lock, not the read lease a downgrade kept either). Every
// primitive's release calls it.
func (s *Service) released(ctx context.Context, k lockKeys, token string, holds int64) {
	if holds > 0 || s.quotaOf(ctx).Leases <= 0 {
		return
	}
	if k.kind == kindRW {
		if st, err := s.rwLock().inspect(ctx, k, token); err != nil || st.Owned {
			return
		}
	}
	s.dropPlace(ctx, k, token)
}
