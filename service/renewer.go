package service

import (
	"context"
	"fmt"
	"time"
)

// RunRenewer renews the due keep-alive leases of every instance sharing this
// Redis and key prefix until ctx ends. Each Latchkey instance runs one; the
// renew_batch script claims entries atomically, so two renewers never renew
// the same lease twice for one due time, and a renewal never outlives a
// release, a force-release or the lease's bounds. RunRenewer never blocks a
// request: it runs on its own goroutine with its own Redis calls, each
// bounded by Config.OpTimeout. Redis errors are counted (reason "store") and
// retried after Config.RenewPoll.
func (s *Service) RunRenewer(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		timer.Reset(s.renewDue(ctx))
	}
}

// renewDue renews due leases, one batch per script call, until none is due;
// it returns how long to sleep before looking again.
func (s *Service) renewDue(ctx context.Context) time.Duration {
	for ctx.Err() == nil {
		d, err := s.dueLeases(ctx)
		if err != nil {
			return s.renewFailed(ctx)
		}
		s.ka.tracked.Set(float64(d.tracked))
		if len(d.members) > 0 {
			if err := s.renewBatch(ctx, d.members); err != nil {
				return s.renewFailed(ctx)
			}
		}
		if len(d.members) < s.cfg.RenewBatch {
			wait := s.cfg.RenewPoll
			if d.nextDueMS > 0 {
				if until := time.Duration(d.nextDueMS-d.nowMS) * time.Millisecond; until < wait {
					wait = until
				}
			}
			return max(wait, time.Millisecond)
		}
	}
	return 0
}

// renewFailed counts a failed Redis call of the renewer (unless it failed
// because the renewer is stopping) and says when to try again.
func (s *Service) renewFailed(ctx context.Context) time.Duration {
	if ctx.Err() != nil {
		return 0
	}
	s.ka.failures.WithLabelValues("store").Inc()
	return s.cfg.RenewPoll
}

// dueSet is what keepalive_due reports.
type dueSet struct {
	nowMS, tracked, nextDueMS int64
	members                   []string
}

func (s *Service) dueLeases(ctx context.Context) (dueSet, error) {
	res, err := s.run(ctx, keepaliveDueScript, []string{s.registryKey()}, s.cfg.RenewBatch)
	if err != nil {
		return dueSet{}, err
	}
	arr, ok := res.([]any)
	if !ok || len(arr) < 3 || len(arr)%2 == 0 {
		return dueSet{}, fmt.Errorf("keepalive_due: unexpected reply %T %v", res, res)
	}
	head, err := int64s("keepalive_due", arr[:3], 3)
	if err != nil {
		return dueSet{}, err
	}
	d := dueSet{nowMS: head[0], tracked: head[1], nextDueMS: head[2]}
	for i := 3; i+1 < len(arr); i += 2 {
		m, ok := arr[i].(string)
		if !ok {
			return dueSet{}, fmt.Errorf("keepalive_due: reply[%d] is %T, want string", i, arr[i])
		}
		d.members = append(d.members, m)
	}
	return d, nil
}

// renewBatch runs renew_batch once for members and records the outcome.
// Members whose name is not a valid lock name (never written by Latchkey)
// are skipped rather than turned into keys.
func (s *Service) renewBatch(ctx context.Context, members []string) error {
	keys := make([]string, 1, 1+2*len(members))
	keys[0] = s.registryKey()
	args := make([]any, 1, 1+len(members))
	args[0] = s.cfg.LostTTL.Milliseconds()
	for _, m := range members {
		name, ok := memberName(m)
		if !ok {
			continue
		}
		k := s.keys(name)
		keys = append(keys, k.lock, k.lost)
		args = append(args, m)
	}
	if len(args) == 1 {
		return nil
	}
	s.ka.batches.Inc()
	res, err := s.run(ctx, renewBatchScript, keys, args...)
	if err != nil {
		return err
	}
	arr, ok := res.([]any)
	if !ok || len(arr) != 1+3*(len(args)-1) {
		return fmt.Errorf("renew_batch: unexpected reply %T of %d entries", res, len(arr))
	}
	for i := 1; i+2 < len(arr); i += 3 {
		code, _ := arr[i].(int64)
		lag, _ := arr[i+1].(int64)
		reason, _ := arr[i+2].(string)
		switch code {
		case 0, 4:
			continue
		case 1:
			s.ka.renewals.Inc()
		case 2, 3:
			s.ka.failures.WithLabelValues(reason).Inc()
		}
		s.ka.lag.Observe(float64(lag) / 1000)
	}
	return nil
}
