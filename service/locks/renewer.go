package locks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// RunRenewer renews the due keep-alive leases of every instance sharing this
// Redis and key prefix until ctx ends. Each Latchkey instance runs one; the
// renew_batch script claims entries atomically, so two renewers never renew
// the same lease twice for one due time, and a renewal never outlives a
// release, a force-release or the lease's bounds. RunRenewer never blocks a
// request: it runs on its own goroutine with its own Redis calls, each
// bounded by Config.OpTimeout. It keeps up to Config.RenewParallel renewal
// calls of up to Config.RenewBatch leases each in flight at once, and each
// lease listed as due goes into exactly one of them.
//
// No error comes back: a Redis error (a timeout or lost connection, which
// wrap ErrUnavailable, or a script error) is counted (reason "store") and the
// renewer looks again after Config.RenewPoll. When ctx ends RunRenewer
// returns once its calls in flight have ended; their context errors are not
// counted.
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

// renewDue renews due leases until none is due: each look at the registry
// lists up to RenewBatch × RenewParallel of them, renewed by concurrent
// batches. It returns how long to sleep before looking again.
func (s *Service) renewDue(ctx context.Context) time.Duration {
	full := s.cfg.RenewBatch * s.cfg.RenewParallel
	for ctx.Err() == nil {
		d, err := s.dueLeases(ctx, full)
		if err != nil {
			s.storeFailed(ctx)
			return s.retryAfterFailure(ctx)
		}
		s.ka.tracked.Set(float64(d.tracked))
		if err := s.renewBatches(ctx, d.members); err != nil {
			return s.retryAfterFailure(ctx)
		}
		if len(d.members) < full {
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

// renewBatches splits members into batches of Config.RenewBatch, each
// member in exactly one, runs renew_batch once per batch with every batch in
// flight at once (a pipelining client sends them together) and waits for all
// of them. Every batch that fails is counted (reason "store") unless ctx
// ended; the outcomes of the others are recorded as usual. Returns nil when
// every batch ran, else the errors of the failed ones joined: each wraps
// ErrUnavailable (timeout, lost connection), is ctx's error (the renewer is
// stopping) or is the script's own error.
func (s *Service) renewBatches(ctx context.Context, members []string) error {
	var errs []error
	switch {
	case len(members) == 0:
		return nil
	case len(members) <= s.cfg.RenewBatch: // one batch: no goroutine needed
		errs = []error{s.renewBatch(ctx, members)}
	default:
		batches := slices.Collect(slices.Chunk(members, s.cfg.RenewBatch))
		errs = make([]error, len(batches))
		var wg sync.WaitGroup
		for i, b := range batches {
			wg.Go(func() { errs[i] = s.renewBatch(ctx, b) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			s.storeFailed(ctx)
		}
	}
	return errors.Join(errs...)
}

// storeFailed counts a failed Redis call of the renewer, unless it failed
// because the renewer is stopping.
func (s *Service) storeFailed(ctx context.Context) {
	if ctx.Err() == nil {
		s.ka.failures.WithLabelValues("store").Inc()
	}
}

// retryAfterFailure says when to look again after a failed call: after
// Config.RenewPoll, or at once when the renewer is stopping.
func (s *Service) retryAfterFailure(ctx context.Context) time.Duration {
	if ctx.Err() != nil {
		return 0
	}
	return s.cfg.RenewPoll
}

// dueSet is what keepalive_due reports.
type dueSet struct {
	nowMS, tracked, nextDueMS int64
	members                   []string
}

// dueLeases runs keepalive_due for up to limit due members, earliest first.
// Returns the error of the script call (see run) or of a malformed reply.
func (s *Service) dueLeases(ctx context.Context, limit int) (dueSet, error) {
	res, err := s.st.Run(ctx, keepaliveDueScript, []string{s.registryKey()}, keepaliveDueArgs(limit)...)
	if err != nil {
		return dueSet{}, err
	}
	arr, ok := res.([]any)
	if !ok || len(arr) < 3 || len(arr)%2 == 0 {
		return dueSet{}, fmt.Errorf("keepalive_due: unexpected reply %T %v", res, res)
	}
	head, err := store.Int64s("keepalive_due", arr[:3], 3)
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
	valid := make([]string, 0, len(members))
	for _, m := range members {
		name, ok := memberName(m)
		if !ok {
			continue
		}
		k := s.keys(name)
		keys = append(keys, k.lock, k.lost)
		valid = append(valid, m)
	}
	if len(valid) == 0 {
		return nil
	}
	s.ka.batches.Inc()
	res, err := s.st.Run(ctx, renewBatchScript, keys, renewBatchArgs(s.cfg, valid)...)
	if err != nil {
		return err
	}
	arr, ok := res.([]any)
	if !ok || len(arr) != 1+3*len(valid) {
		return fmt.Errorf("renew_batch: unexpected reply %T of %d entries", res, len(arr))
	}
	for i := 1; i+2 < len(arr); i += 3 {
		code, _ := arr[i].(int64)
		lag, _ := arr[i+1].(int64)
		reason, _ := arr[i+2].(string)
		switch code {
		case batchSkipped, batchDropped:
			continue
		case batchRenewed:
			s.ka.renewals.Inc()
		case batchMissed, batchLost:
			s.ka.failures.WithLabelValues(reason).Inc()
		}
		s.ka.lag.Observe(float64(lag) / 1000)
	}
	return nil
}
