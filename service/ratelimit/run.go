package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// runLimits runs ratelimit_multi.lua for one decision under sp, bounded
// by ctx, taking the units of leased limits from their pools first; when
// the pools cover every limit it answers without a call. A leased limit
// that gets no pool (the table is full) is asked of Redis without a lease.
// The reply goes to out, multiReplyPer entries per limit; takes are the
// leased limits' takes (zero for the others), already settled and unpinned;
// at is the instant the calendar windows' periods were computed for. A
// peek takes no lease and writes nothing.
func (s *Service) runLimits(ctx context.Context, ctr *decisionCounters, sp limitSpec, rkeys []string, cost int64, out []int64, peek bool) ([]leaseTake, time.Time, error) {
	n := len(sp.limits)
	var takes []leaseTake
	local, unleased := 0, false
	t0 := time.Now()
	if sp.leased && !peek {
		takes = make([]leaseTake, n)
		defer unpinTakes(takes)
		for i, l := range sp.limits {
			if l.Lease == 0 {
				continue
			}
			p := s.leases.pool(rkeys[i], t0)
			if p == nil {
				unleased = true
				continue
			}
			t, err := p.reserve(ctx, cost, t0)
			if err != nil {
				p.unpin()
				undoTakes(takes[:i])
				return nil, time.Time{}, fmt.Errorf("%s: %w", rateLimitMultiScript.Name(), errors.Join(store.ErrUnavailable, err))
			}
			takes[i] = t
			if t.have >= cost {
				local++
			}
			if t.dry && n == 1 && !l.Shadow {
				// Redis cannot cover it before dryUntil: denied here. (A
				// limit among others asks Redis, which denies it, so the
				// answer reports every limit.)
				p.mu.Lock()
				avail, wait := p.avail+p.unitsAt(t0), p.dryUntil.Sub(t0).Milliseconds()
				p.mu.Unlock()
				out[0], out[1], out[2], out[3] = multiDenied, avail, wait, wait+1
				return make([]leaseTake, n), time.Time{}, nil
			}
		}
		if local == n {
			for i := range n {
				out[multiReplyPer*i], out[multiReplyPer*i+1], out[multiReplyPer*i+2] = multiCounted, -1, -1
			}
			for i := range n {
				ctr.lease(i, sp.limits[i].Name, "local")
			}
			return takes, time.Time{}, nil
		}
	}
	args := sp.args
	if args == nil { // one limit, decided by ratelimit_multi.lua for a peek
		for _, l := range sp.limits {
			a := limitArgs(l)
			args = append(args, a[:]...)
		}
	}
	argv := make([]any, 1+n, 1+n+len(args))
	argv[0] = cost // ARGV[1] cost
	for i := range n {
		argv[1+i] = int64(0) // ARGV[1+i] units held from a lease
		if takes != nil {
			argv[1+i] = takes[i].have
		}
	}
	argv = append(argv, args...)
	if unleased {
		for i, l := range sp.limits {
			if l.Lease > 0 && takes[i].pool == nil {
				argv[1+n+5*i+leaseArg] = int64(0) // ARGV[n+5i] lease: none, as it has no pool
			}
		}
	}
	if peek {
		for i := range n {
			if sp.limits[i].Calendar == nil && sp.limits[i].Algorithm == FixedWindow {
				argv[1+n+5*i+leaseArg] = int64(0) // ARGV[n+5i] lease: none, as a peek takes none
			}
		}
		argv = append(argv, peekArg) // ARGV[6n+2] peek
	}
	res, at, err := s.periodCall(ctx, rateLimitMultiScript, sp.limits, rkeys, argv, func(argv []any, i int, start, end int64) {
		argv[1+n+5*i+windowArg] = end  // ARGV[n+5i-1] cw: the period's end
		argv[1+n+5*i+leaseArg] = start // ARGV[n+5i] cw: the period's start
	})
	if err == nil {
		err = s.multiReply(res, out)
	}
	if err != nil {
		undoTakes(takes)
		return nil, at, err
	}
	for i, t := range takes {
		o := multiReplyPer * i
		status, remaining, reset := out[o], out[o+1], time.Duration(out[o+2])*time.Millisecond
		switch {
		case t.pool == nil: // no lease, or no pool for it in a full table
			if status == multiCounted && sp.limits[i].Lease > 0 {
				ctr.lease(i, sp.limits[i].Name, "unleased")
			}
		case status == multiCounted && t.refill:
			t.granted(out[o+4], cost-t.have, remaining, t0.Add(reset), t0)
			ctr.lease(i, sp.limits[i].Name, "granted")
		case status == multiCounted:
			ctr.lease(i, sp.limits[i].Name, "local")
		default:
			t.undo(status == multiDenied || status == multiWouldDeny, remaining, t0.Add(reset))
		}
	}
	return takes, at, nil
}

// runBatched decides one request under sp's limits (sp.batch: several,
// none leased, no calendar window) on rkeys through the multi batcher:
// with the concurrent decisions of every multi-limit policy in one call of
// ratelimit_multi_batch.lua, which decides each on its own, all or
// nothing, as ratelimit_multi.lua decides one. The reply goes to out,
// multiReplyPer entries per limit. The call is bounded by the decision
// timeout from the moment it is queued. Returns the batcher's errors (see
// decisionBatcher.decide).
func (s *Service) runBatched(ctx context.Context, sp limitSpec, rkeys []string, cost int64, out []int64) error {
	e, err := s.multi.decideMulti(ctx, rkeys, cost, sp.args) // sp.args: limitArgs of each
	if err != nil {
		return err
	}
	return s.multiFill(rateLimitMultiBatchScript, e, out)
}

// fromLeases answers a decision into out from the units this instance
// holds when every limit of sp is leased and holds the cost: no Redis call,
// no wait. It reports false otherwise, having taken nothing. The takes
// returned are unpinned.
func (s *Service) fromLeases(ctr *decisionCounters, sp limitSpec, rkeys keyList, cost int64, out []int64) ([]leaseTake, bool) {
	if !sp.allLeased {
		return nil, false
	}
	now := time.Now()
	takes := make([]leaseTake, len(sp.limits))
	defer unpinTakes(takes)
	for i := range sp.limits {
		p := s.leases.find(rkeys.at(i))
		if p == nil {
			undoTakes(takes[:i])
			return nil, false
		}
		t, ok := p.tryLocal(cost, now)
		if !ok {
			p.unpin()
			undoTakes(takes[:i])
			return nil, false
		}
		takes[i] = t
	}
	for i, l := range sp.limits {
		out[multiReplyPer*i], out[multiReplyPer*i+1], out[multiReplyPer*i+2] = multiCounted, -1, -1
		ctr.lease(i, l.Name, "local")
	}
	return takes, true
}

// undoTakes gives back the units of takes whose decision was not counted.
func undoTakes(takes []leaseTake) {
	for _, t := range takes {
		if t.pool != nil && !t.dry {
			t.undo(false, 0, time.Time{})
		}
	}
}

// unpinTakes unpins the pools of takes, once the decision is settled.
func unpinTakes(takes []leaseTake) {
	for _, t := range takes {
		if t.pool != nil {
			t.pool.unpin()
		}
	}
}
