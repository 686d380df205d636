package ratelimit

import "time"

// DenyCacheLen reports how many denials s holds in its in-process cache.
func DenyCacheLen(s *Service) int { return s.cache.len() }

// QueuedDecisions reports how many decisions of an algorithm wait for a
// script call.
func QueuedDecisions(s *Service, alg Algorithm) int {
	b := s.batchers[alg]
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// Senders reports how many calls of an algorithm are out (each sender has
// one out, or is about to take the queue).
func Senders(s *Service, alg Algorithm) int {
	b := s.batchers[alg]
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.senders
}

// LeasePools reports how many pools of leased limits s keeps.
func LeasePools(s *Service) int { return s.leases.len() }

// SetViewsClock makes s's views (PolicyStats, TopDenied) read now as the
// time.
func SetViewsClock(s *Service, now func() time.Time) { s.views.now = now }

// TopKeysSize reports how many keys the sketch of tenant's policy holds,
// over both its periods; 0 before its first denial.
func TopKeysSize(s *Service, tenant, policy string) int {
	pv := s.views.lookup(tenant, policy)
	if pv == nil {
		return 0
	}
	return pv.top.size()
}

// QueuedMultiDecisions reports how many multi-limit decisions wait for a
// script call.
func QueuedMultiDecisions(s *Service) int {
	b := s.multi
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}
