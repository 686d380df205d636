package locks

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RenewSemaphore extends the lease on semaphore name owned by token to ttl
// (zero: the lease's own TTL). A keep-alive lease is renewed at most to its
// max-hold deadline and the renewal counts as its heartbeat, as Renew does
// for a lock. Returns ErrNotFound when the token holds no lease (expired,
// released or force-released), a *ValidationError for bad input, or an
// error wrapping ErrUnavailable.
func (s *Service) RenewSemaphore(ctx context.Context, name, token string, ttl time.Duration) (SemaphoreLease, error) {
	if err := s.checkRenew(name, token, ttl); err != nil {
		return SemaphoreLease{}, err
	}
	k := s.semKeys(ctx, name)
	lease, err := s.renewSemaphore(ctx, k, token, ttl)
	s.markRenewed(ctx, k, ttl, lease.Keepalive, lease.TTL, lease.ExpiresAt)
	if err == nil {
		s.setPlace(ctx, k, token, leaseLasts(semLease(lease)))
	}
	return lease, err
}

// renewSemaphore is RenewSemaphore on validated input.
func (s *Service) renewSemaphore(ctx context.Context, k lockKeys, token string, ttl time.Duration) (SemaphoreLease, error) {
	res, err := s.st.RunReplicated(ctx, semScripts.renew,
		[]string{k.lock, k.holders, k.leases, s.registryKey(k), k.lost, k.channel},
		renewArgs(s.cfg, kindSem, k.regName(), token, ttl, 0)...)
	v, err := ownerReply("sem_renew", 7, res, err)
	if err != nil {
		return SemaphoreLease{}, err
	}
	return SemaphoreLease{Name: k.name, Token: token, Count: v[1], Fence: v[2],
		TTL:       time.Duration(v[3]) * time.Millisecond,
		ExpiresAt: time.UnixMilli(v[4] + v[3]).UTC(),
		Keepalive: keepaliveOf(v[5], v[6], v[4])}, nil
}

// ReleaseSemaphore gives back the permits of the lease on semaphore name
// owned by token and wakes the waiters. It returns the permits given back.
// Returns ErrNotFound, a *ValidationError or an error wrapping
// ErrUnavailable.
func (s *Service) ReleaseSemaphore(ctx context.Context, name, token string) (int64, error) {
	if err := checkNameToken(name, token); err != nil {
		return 0, err
	}
	return s.releaseSemaphore(ctx, s.semKeys(ctx, name), token)
}

// releaseSemaphore is ReleaseSemaphore on validated input.
func (s *Service) releaseSemaphore(ctx context.Context, k lockKeys, token string) (int64, error) {
	res, err := s.st.RunReplicated(ctx, semScripts.release,
		[]string{k.lock, k.holders, k.leases, s.registryKey(k), k.lost, k.channel},
		releaseArgs(s.cfg, kindSem, k.regName(), token)...)
	v, err := ownerReply("sem_release", 2, res, err)
	if err != nil {
		return 0, err
	}
	s.semMetrics.releases.WithLabelValues("released").Inc()
	s.released(ctx, k, token, 0)
	return v[1], nil
}

// ForceReleaseSemaphore removes every lease of semaphore name, bumps its
// fence so the evicted leases' fences are stale, records each evicted
// token's loss (force_released) and wakes the waiters. It returns how many
// leases were removed. Returns a *ValidationError or an error wrapping
// ErrUnavailable.
func (s *Service) ForceReleaseSemaphore(ctx context.Context, name string) (int64, error) {
	if err := ValidateName(name); err != nil {
		return 0, err
	}
	k := s.semKeys(ctx, name)
	res, err := s.st.RunReplicated(ctx, semScripts.forceRelease,
		[]string{k.lock, k.holders, k.leases, s.registryKey(k), k.lost, k.channel},
		semForceReleaseArgs(s.cfg, k.regName())...)
	if err != nil {
		return 0, err
	}
	n, ok := res.(int64)
	if !ok {
		return 0, fmt.Errorf("sem_force_release: unexpected reply %T %v", res, res)
	}
	s.semMetrics.releases.WithLabelValues("forced").Add(float64(n))
	if n > 0 {
		s.evictPlaces(ctx, k)
	}
	return n, nil
}

// SetSemaphorePermits changes the capacity of semaphore name to permits
// (creating its record when none is kept) and wakes its waiters. Leases
// already granted keep their permits. It returns the state after the
// change. Returns a *ValidationError or an error wrapping ErrUnavailable.
func (s *Service) SetSemaphorePermits(ctx context.Context, name string, permits int64) (SemaphoreState, error) {
	if err := ValidateName(name); err != nil {
		return SemaphoreState{}, err
	}
	if err := checkPermits(permits); err != nil {
		return SemaphoreState{}, err
	}
	k := s.semKeys(ctx, name)
	if _, err := s.st.RunReplicated(ctx, semSetPermitsScript, []string{k.lock, k.channel},
		semSetPermitsArgs(s.cfg, permits)...); err != nil {
		return SemaphoreState{}, err
	}
	return s.InspectSemaphore(ctx, name, "")
}

// InspectSemaphore reads the state of semaphore name; with a token it also
// reports the lease that token holds, or why it lost it. Returns a
// *ValidationError or an error wrapping ErrUnavailable.
func (s *Service) InspectSemaphore(ctx context.Context, name, token string) (SemaphoreState, error) {
	if err := checkNameOptionalToken(name, token); err != nil {
		return SemaphoreState{}, err
	}
	k := s.semKeys(ctx, name)
	res, err := s.st.Run(ctx, semScripts.inspect,
		[]string{k.lock, k.holders, k.leases, k.waiters, k.lost, s.registryKey(k)},
		inspectArgs(kindSem, k.regName(), token)...)
	arr, v, err := inspectReply("sem_inspect", 16, 14, res, err)
	if err != nil {
		return SemaphoreState{}, err
	}
	st := SemaphoreState{Name: name, Permits: v[0], InUse: v[1], Holders: v[2], Waiters: v[3],
		Fair: truth(v[4]), Fence: v[5], Owned: truth(v[7])}
	st.LostReason, _ = arr[14].(string)
	if st.Owned {
		st.Owner, _ = arr[15].(string)
		st.Lease = &SemaphoreLease{Name: name, Count: v[8], Permits: v[0], Fence: v[9],
			TTL:       time.Duration(v[10]) * time.Millisecond,
			ExpiresAt: time.UnixMilli(v[6] + v[10]).UTC(),
			Keepalive: keepaliveOf(v[11], v[12], v[13])}
	}
	return st, nil
}

// semMetrics are the semaphore's Prometheus collectors. Every label has a
// fixed set of values.
type semMetrics struct {
	grants    prometheus.Counter
	conflicts *prometheus.CounterVec // reason: unavailable, mode, permits, token
	releases  *prometheus.CounterVec // kind: released, forced
	waits     *prometheus.CounterVec // outcome: acquired, timeout, canceled, conflict, error
}

func newSemMetrics(reg prometheus.Registerer) *semMetrics {
	m := &semMetrics{
		grants: counter(reg, "latchkey_semaphore_grants_total", "Semaphore leases granted."),
		conflicts: counterVec(reg, "latchkey_semaphore_conflicts_total",
			"Semaphore acquire attempts refused, by reason (unavailable, mode, permits, token).", "reason"),
		releases: counterVec(reg, "latchkey_semaphore_releases_total",
			"Semaphore leases ended by release, by kind (released, forced).", "kind"),
		waits: counterVec(reg, "latchkey_semaphore_waits_total",
			"Semaphore acquires that waited, by outcome (acquired, timeout, canceled, conflict, error).", "outcome"),
	}
	for _, r := range []string{"unavailable", "mode", "permits", "token"} {
		m.conflicts.WithLabelValues(r)
	}
	return m
}
