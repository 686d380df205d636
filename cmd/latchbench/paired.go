package main

import (
	"context"
	"sort"
	"time"
)

// runPaired measures a closed-loop scenario in o.rounds rounds. Each round
// runs the ceiling for duration/rounds, then the scenario for as long, so
// both see the machine as it is at that moment: on a shared machine whose
// speed drifts over seconds, a ceiling measured once at the start would
// skew every ratio after it. The scenario's latencies and usage cover all
// its rounds; its ratios are the median over the rounds.
func runPaired(ctx context.Context, o *options, sc scenario) Result {
	slice := o.duration / time.Duration(o.rounds)
	var all []sample
	var elapsed time.Duration
	var used usage
	var rpsRatios, p99Ratios []float64
	var ceilings pairedCeilings
	for r := 0; r < o.rounds && ctx.Err() == nil; r++ {
		start := o.meter.read(ctx)
		cs, ce := runLoad(ctx, o.b.base, o.conns, slice, o.ceilingOp)
		ceiling := summarize("ceiling", cs, ce)
		before := o.meter.read(ctx)
		ceilings.add(o.meter.usage(start, before, ceiling.Requests), ceiling.Requests)
		ss, se := runLoad(ctx, o.b.base, o.conns, slice, sc.op)
		round := summarize(sc.name, ss, se)
		used = addUsage(used, o.meter.usage(before, o.meter.read(ctx), round.Requests), r == 0)
		all, elapsed = append(all, ss...), elapsed+se
		if ceiling.RPS > 0 && round.RPS > 0 {
			rpsRatios = append(rpsRatios, round.RPS/ceiling.RPS)
			p99Ratios = append(p99Ratios, round.P99MS/ceiling.P99MS)
		}
	}
	res := summarize(sc.name, all, elapsed)
	res.Description = sc.description
	res.Usage = perRequest(used, res.Requests)
	res.CeilingCPUus = ceilings.perRequest()
	setRoundRatios(&res, rpsRatios, p99Ratios)
	return res
}

// pairedCeilings sums the CPU and requests of a scenario's paired ceiling
// rounds.
type pairedCeilings struct {
	cpu      float64 // seconds: the server's, Redis's and the load generator's
	requests int
}

// add counts one ceiling round's usage u (its load generator's CPU
// included) and requests.
func (c *pairedCeilings) add(u usage, requests int) {
	c.cpu += u.ServerCPUSeconds + u.RedisCPUSeconds + u.LoadgenCPUSeconds
	c.requests += requests
}

// perRequest is the rounds' CPU a request in µs, 0 without requests.
func (c pairedCeilings) perRequest() float64 {
	if c.requests == 0 {
		return 0
	}
	return c.cpu / float64(c.requests) * 1e6
}

// perRequest is the rounds' summed usage with its Redis commands per
// request recomputed over all of the rounds' requests.
func perRequest(used usage, requests int) usage {
	used.RedisCmdsPerReq = 0
	if requests > 0 && used.RedisCommands > 0 {
		used.RedisCmdsPerReq = float64(used.RedisCommands) / float64(requests)
	}
	return used
}

// setRoundRatios sets res's ratios from its paired rounds' throughput and
// p99 ratios: the median of each, and the range of the throughput ones.
func setRoundRatios(res *Result, rps, p99 []float64) {
	res.RoundRPSRatios = rps
	res.RPSRatio, res.P99Ratio = median(rps), median(p99)
	res.RPSRatioMin, res.RPSRatioMax = 0, 0
	for i, x := range rps {
		if i == 0 || x < res.RPSRatioMin {
			res.RPSRatioMin = x
		}
		if i == 0 || x > res.RPSRatioMax {
			res.RPSRatioMax = x
		}
	}
}

// addUsage adds one round's usage to the total: CPU and commands add up,
// memory is read at the start of the first round and the end of the last.
func addUsage(total, round usage, first bool) usage {
	if first {
		total.ServerRSSStartMiB = round.ServerRSSStartMiB
	}
	total.ServerCPUSeconds += round.ServerCPUSeconds
	total.ServerRSSEndMiB = round.ServerRSSEndMiB
	total.HeapInuseEndMiB = round.HeapInuseEndMiB
	total.RedisCommands += round.RedisCommands
	total.RedisCPUSeconds += round.RedisCPUSeconds
	total.RedisNodes = addNodeUsages(total.RedisNodes, round.RedisNodes)
	total.LoadgenCPUSeconds += round.LoadgenCPUSeconds
	total.KeepaliveRenewals += round.KeepaliveRenewals
	return total
}

// median returns the middle value of xs (the mean of the two middle ones
// for an even count), 0 for none. xs is not changed.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
