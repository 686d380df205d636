package locks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
)

// The renewer's scripts: the look at the registry (keepalive_due) and, on
// a cluster only, the directory of the registry's shards (keepalive_mark,
// keepalive_claim, keepalive_settle; see shards.go and renewer_cluster.go).
// Each primitive's batch renewal is its leaseScripts' renewBatch, whose
// ARGV and reply codes are here.
var (
	keepaliveDueScript    = store.NewScript("keepalive_due", lua.Source("keepalive_due"))
	keepaliveMarkScript   = store.NewScript("keepalive_mark", lua.Source("keepalive_mark"))
	keepaliveClaimScript  = store.NewScript("keepalive_claim", lua.Source("keepalive_claim"))
	keepaliveSettleScript = store.NewScript("keepalive_settle", lua.Source("keepalive_settle"))
	dirScripts            = []*store.Script{keepaliveMarkScript, keepaliveClaimScript, keepaliveSettleScript}
)

// keepaliveDueArgs is keepalive_due.lua's ARGV.
func keepaliveDueArgs(limit int) []any {
	return []any{
		limit, // ARGV[1] most entries to return
	}
}

// Codes of renew_batch.lua's reply, one per entry.
const (
	batchSkipped = 0 // no longer due or no longer registered
	batchRenewed = 1 // renewed
	batchMissed  = 2 // heartbeat missed: not renewed, the lease runs out its TTL
	batchLost    = 3 // the lease is gone or taken over; the reason says why
	batchDropped = 4 // no longer kept alive (nothing was lost)
)

// renewBatchArgs is renew_batch.lua's ARGV: one registry member per entry.
func renewBatchArgs(cfg Config, members []string) []any {
	args := make([]any, 1, 1+len(members))
	args[0] = cfg.LostTTL.Milliseconds() // ARGV[1] lost-lease reasons' retention, ms
	for _, m := range members {
		args = append(args, m) // ARGV[1+i] registry member of entry i
	}
	return args
}

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
			if s.dir != nil {
				s.dir.reconciled.Wait()
			}
			return
		case <-timer.C:
		}
		if s.dir != nil {
			timer.Reset(s.renewShards(ctx))
		} else {
			timer.Reset(s.renewDue(ctx))
		}
	}
}

// renewDue renews due leases until none is due: each look at the registry
// lists up to RenewBatch × RenewParallel of them, renewed by concurrent
// batches. It returns how long to sleep before looking again.
func (s *Service) renewDue(ctx context.Context) time.Duration {
	full := s.cfg.RenewBatch * s.cfg.RenewParallel
	for ctx.Err() == nil {
		d, err := s.dueLeases(ctx, s.regKey, full)
		if err != nil {
			s.storeFailed(ctx)
			return s.retryAfterFailure(ctx)
		}
		if _, err := s.renewBatches(ctx, s.regKey, d.members); err != nil {
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

// renewBatches splits members of the registry key reg by primitive, and each primitive's into
// batches of Config.RenewBatch, each member in exactly one; it runs the
// primitive's batch script once per batch with every batch in flight at
// once (a pipelining client sends them together) and waits for all of them.
// Every batch that fails is counted (reason "store") unless ctx ended; the
// outcomes of the others are recorded as usual. Returns when the registry's
// first entry is due after the batches (the earliest any batch saw; -1 when
// it is empty or there was no batch) and nil when every batch ran, else the
// errors of the failed ones joined: each wraps ErrUnavailable (timeout, lost
// connection), is ctx's error (the renewer is stopping) or is the script's
// own error.
func (s *Service) renewBatches(ctx context.Context, reg string, members []string) (nextDueMS int64, err error) {
	batches := s.batches(reg, members)
	var errs []error
	next := make([]int64, len(batches))
	switch len(batches) {
	case 0:
		return -1, nil
	case 1: // one batch: no goroutine needed
		var err error
		next[0], err = s.renewBatch(ctx, batches[0])
		errs = []error{err}
	default:
		errs = make([]error, len(batches))
		var wg sync.WaitGroup
		for i, b := range batches {
			wg.Go(func() { next[i], errs[i] = s.renewBatch(ctx, b) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			s.storeFailed(ctx)
		}
	}
	nextDueMS = -1
	for _, n := range next {
		if n >= 0 && (nextDueMS < 0 || n < nextDueMS) {
			nextDueMS = n
		}
	}
	return nextDueMS, errors.Join(errs...)
}

// renewal is the primitive of kind k and its batch renewal script, for the
// renewer; ok is false for a kind this version of Latchkey does not know.
func (s *Service) renewal(k kind) (p primitive, script *store.Script, ok bool) {
	switch k {
	case kindMutex:
		return s.mutex, mutexScripts.renewBatch, true
	case kindSem:
		return s.semaphore(), semScripts.renewBatch, true
	case kindRW:
		return s.rwlock, rwScripts.renewBatch, true
	case kindEl:
		return s.election, elScripts.renewBatch, true
	}
	return nil, nil, false
}

// batch is the due members of one primitive that one script call (of
// script, the primitive's batch renewal) renews, with the keys it takes.
type batch struct {
	p       primitive
	script  *store.Script
	members []string
	keys    []string // the registry, then p.batchKeys of each member
}

// batches groups members of the registry key reg by primitive, in the order each primitive first
// appears, and cuts each group into batches of Config.RenewBatch. Members
// that are not a valid registry entry of a primitive this service knows
// (never written by this version of Latchkey) are skipped rather than turned
// into keys.
func (s *Service) batches(reg string, members []string) []batch {
	type entry struct {
		m string
		k lockKeys
	}
	var kinds []kind
	groups := map[kind][]entry{}
	for _, m := range members {
		k, ok := memberKeys(s.prefix, m)
		if !ok {
			continue
		}
		if _, _, known := s.renewal(k.kind); !known {
			continue
		}
		if _, seen := groups[k.kind]; !seen {
			kinds = append(kinds, k.kind)
		}
		groups[k.kind] = append(groups[k.kind], entry{m, k})
	}
	var out []batch
	for _, kd := range kinds {
		p, script, _ := s.renewal(kd)
		for c := range slices.Chunk(groups[kd], s.cfg.RenewBatch) {
			b := batch{p: p, script: script, members: make([]string, 0, len(c)), keys: []string{reg}}
			for _, e := range c {
				b.members = append(b.members, e.m)
				b.keys = p.batchKeys(b.keys, e.k)
			}
			out = append(out, b)
		}
	}
	return out
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

// dueLeases runs keepalive_due on the registry key reg for up to limit due
// members, earliest first. Returns the error of the script call (see run)
// or of a malformed reply.
func (s *Service) dueLeases(ctx context.Context, reg string, limit int) (dueSet, error) {
	res, err := s.st.Run(ctx, keepaliveDueScript, []string{reg}, keepaliveDueArgs(limit)...)
	if err != nil {
		return dueSet{}, err
	}
	return parseDue(res)
}

// parseDue decodes a keepalive_due reply.
func parseDue(res any) (dueSet, error) {
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

// renewBatch runs b's batch script once and records the outcome. It
// returns when the registry's first entry is due after the batch (-1: the
// registry is empty).
func (s *Service) renewBatch(ctx context.Context, b batch) (nextDueMS int64, err error) {
	s.ka.batches.Inc()
	res, err := s.st.Run(ctx, b.script, b.keys, renewBatchArgs(s.cfg, b.members)...)
	if err != nil {
		return 0, err
	}
	return s.recordBatch(b, res)
}

// recordBatch records the outcome of b's batch script, whose reply is res,
// and returns when the registry's first entry is due after it (-1: the
// registry is empty).
func (s *Service) recordBatch(b batch, res any) (nextDueMS int64, err error) {
	arr, ok := res.([]any)
	if !ok || len(arr) != 2+3*len(b.members) {
		return 0, fmt.Errorf("%s: unexpected reply %T of %d entries", b.script.Name(), res, len(arr))
	}
	nextDueMS, ok = arr[len(arr)-1].(int64)
	if !ok {
		return 0, fmt.Errorf("%s: next due time is %T", b.script.Name(), arr[len(arr)-1])
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
	return nextDueMS, nil
}
