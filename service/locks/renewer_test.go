package locks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// acquireKeepalives takes n keep-alive leases with ttl 3s (due every 1s),
// named lease-000, lease-001, ...
func acquireKeepalives(t *testing.T, svc *locks.Service, n int) {
	t.Helper()
	for i := range n {
		mustAcquire(t, svc, fmt.Sprintf("lease-%03d", i), locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true})
	}
}

// wantEachRenewedOnce checks that calls named each of n leases exactly once
// and renewed it, in batches of at most batch members.
func wantEachRenewedOnce(t *testing.T, calls []renewCall, n, batch int) {
	t.Helper()
	named, renewed := renewedCounts(calls)
	if len(named) != n {
		t.Errorf("renewal calls named %d leases, want %d", len(named), n)
	}
	for m, c := range named {
		if c != 1 || renewed[m] != 1 {
			t.Errorf("%s: in %d batches, renewed %d times; want 1 and 1", m, c, renewed[m])
		}
	}
	for _, c := range calls {
		if len(c.members) > batch {
			t.Errorf("a renewal call named %d leases, want at most %d", len(c.members), batch)
		}
	}
}

// Every due lease is renewed exactly once per due time, by batches of at
// most RenewBatch leases of which up to RenewParallel are in flight together.
func TestRenewerParallelBatchesRenewEachLeaseOncePerDueTime(t *testing.T) {
	tests := []struct {
		leases, batch, parallel int
	}{
		{leases: 95, batch: 10, parallel: 4}, // two full sets, then 15
		{leases: 40, batch: 10, parallel: 4}, // exactly one full set
		{leases: 41, batch: 10, parallel: 4},
		{leases: 7, batch: 10, parallel: 4},  // one partial batch
		{leases: 30, batch: 10, parallel: 1}, // one batch at a time
		{leases: 33, batch: 5, parallel: 8},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d leases, batch %d, parallel %d", tt.leases, tt.batch, tt.parallel), func(t *testing.T) {
			m, rdb := newTestRedis(t)
			rec := gated(rdb)
			reg := prometheus.NewRegistry()
			svc := mustNew(t, rec, locks.Config{RenewBatch: tt.batch, RenewParallel: tt.parallel, Registerer: reg}, store.Config{OpTimeout: time.Minute})
			acquireKeepalives(t, svc, tt.leases)
			now := t0
			// The first look lists min(leases, batch × parallel) due leases:
			// all of their batches are in flight before any of them returns.
			inFlight := min((min(tt.leases, tt.batch*tt.parallel)+tt.batch-1)/tt.batch, tt.parallel)
			for round := 1; round <= 3; round++ {
				advance(m, &now, time.Second)
				done := make(chan time.Duration)
				go func() { done <- locks.RenewDueNow(t.Context(), svc) }()
				if round == 1 {
					waitEntered(t, rec, inFlight)
					if got := rec.busy(); got != inFlight {
						t.Errorf("renewal calls in flight = %d, want %d", got, inFlight)
					}
					close(rec.gate)
				}
				if wait := <-done; wait != 100*time.Millisecond {
					t.Errorf("round %d: renewer would sleep %s, want RenewPoll 100ms", round, wait)
				}
				calls := rec.take()
				wantEachRenewedOnce(t, calls, tt.leases, tt.batch)
				if want := (tt.leases + tt.batch - 1) / tt.batch; len(calls) != want {
					t.Errorf("round %d: %d renewal calls, want %d", round, len(calls), want)
				}
				if got, want := storetest.CounterValue(t, reg, "latchkey_keepalive_renewals_total"), float64(tt.leases*round); got != want {
					t.Errorf("round %d: renewals = %v, want %v", round, got, want)
				}
			}
			for i := range tt.leases {
				if got := mustInspect(t, svc, fmt.Sprintf("lease-%03d", i), "").TTL; got != 3*time.Second {
					t.Errorf("lease-%03d: TTL %s after the renewals, want 3s", i, got)
				}
			}
		})
	}
}

// Two renewers list the same due leases and renew them with parallel
// batches at the same time: each lease is still renewed once per due time.
func TestTwoRenewersWithParallelBatchesRenewOncePerDueTime(t *testing.T) {
	const leases, batch, parallel = 80, 10, 4
	m, rdbA := newTestRedis(t)
	rdbB := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdbB.Close() })
	recA := gated(rdbA)
	recB := &renewRecorder{Client: rdbB, entered: recA.entered, gate: recA.gate} // one gate for both
	cfg := func(reg prometheus.Registerer) locks.Config {
		return locks.Config{RenewBatch: batch, RenewParallel: parallel, Registerer: reg}
	}
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a, b := mustNew(t, recA, cfg(regA), opTimeoutMinute), mustNew(t, recB, cfg(regB), opTimeoutMinute)
	acquireKeepalives(t, a, leases)
	now := t0
	for round := 1; round <= 3; round++ {
		advance(m, &now, time.Second)
		done := make(chan struct{}, 2)
		for _, svc := range []*locks.Service{a, b} {
			go func() { locks.RenewDueNow(t.Context(), svc); done <- struct{}{} }()
		}
		if round == 1 {
			// Both renewers listed the same first 40 due leases before
			// either renewal call ran: every one of them is raced for.
			waitEntered(t, recA, 2*parallel)
			close(recA.gate)
		}
		<-done
		<-done
		calls := append(recA.take(), recB.take()...)
		named, renewed := renewedCounts(calls)
		if len(renewed) != leases {
			t.Errorf("round %d: %d leases renewed, want %d", round, len(renewed), leases)
		}
		raced := 0
		for mem, n := range renewed {
			if n != 1 {
				t.Errorf("round %d: %s renewed %d times, want once", round, mem, n)
			}
			if named[mem] > 1 {
				raced++
			}
		}
		if round == 1 && raced < batch*parallel {
			t.Errorf("round 1: %d leases named by both renewers, want at least %d", raced, batch*parallel)
		}
		total := storetest.CounterValue(t, regA, "latchkey_keepalive_renewals_total") + storetest.CounterValue(t, regB, "latchkey_keepalive_renewals_total")
		if want := float64(leases * round); total != want {
			t.Errorf("round %d: renewals by both = %v, want %v", round, total, want)
		}
	}
}

// A failed batch is counted once (reason "store") and the renewer backs off
// by RenewPoll; the batches in flight with it are renewed and recorded, and
// the next look renews what the failed one held, once.
func TestRenewerFailedBatch(t *testing.T) {
	m, rdb := newTestRedis(t)
	failing := true
	rec := &renewRecorder{Client: rdb, fail: func(members []string) error {
		for _, mem := range members {
			if failing && strings.HasSuffix(mem, ":lease-013") {
				return serverError("ERR boom")
			}
		}
		return nil
	}}
	reg := prometheus.NewRegistry()
	svc := mustNew(t, rec, locks.Config{RenewBatch: 10, RenewParallel: 4, RenewPoll: 250 * time.Millisecond, Registerer: reg})
	acquireKeepalives(t, svc, 25)
	now := t0
	advance(m, &now, time.Second)

	if wait := locks.RenewDueNow(t.Context(), svc); wait != 250*time.Millisecond {
		t.Errorf("after a failed batch the renewer would sleep %s, want RenewPoll 250ms", wait)
	}
	calls := rec.take()
	var failed []string
	for _, c := range calls {
		if c.err != nil {
			failed = append(failed, c.members...)
		}
	}
	// Batches of 10, 10 and 5: the one holding lease-013 fails.
	if len(calls) != 3 || (len(failed) != 10 && len(failed) != 5) {
		t.Fatalf("%d calls, %d leases in failed ones; want 3 calls, one failed batch", len(calls), len(failed))
	}
	if got := storetest.CounterValue(t, reg, "latchkey_keepalive_renewal_failures_total", "reason", "store"); got != 1 {
		t.Errorf(`failures{reason="store"} = %v, want 1`, got)
	}
	if got, want := storetest.CounterValue(t, reg, "latchkey_keepalive_renewals_total"), float64(25-len(failed)); got != want {
		t.Errorf("renewals = %v, want %v (the batches that did not fail)", got, want)
	}

	failing = false
	locks.RenewDueNow(t.Context(), svc)
	calls = rec.take()
	wantEachRenewedOnce(t, calls, len(failed), 10)
	_, renewed := renewedCounts(calls)
	for _, mem := range failed {
		if renewed[mem] != 1 {
			t.Errorf("%s (in the failed batch) renewed %d times on the next look, want once", mem, renewed[mem])
		}
	}
	if got := storetest.CounterValue(t, reg, "latchkey_keepalive_renewals_total"); got != 25 {
		t.Errorf("renewals = %v, want 25", got)
	}
}

// Stopping the renewer while its batches are in flight is not a failure,
// and RunRenewer returns only once those calls have ended.
func TestRenewerStopWithBatchesInFlight(t *testing.T) {
	m, rdb := newTestRedis(t)
	rec := gated(rdb)
	reg := prometheus.NewRegistry()
	svc := mustNew(t, rec, locks.Config{RenewBatch: 10, RenewParallel: 4, Registerer: reg}, store.Config{OpTimeout: time.Minute})
	acquireKeepalives(t, svc, 25)
	now := t0
	advance(m, &now, time.Second)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); svc.RunRenewer(ctx) }()
	waitEntered(t, rec, 3)
	cancel()
	<-done
	if n := rec.busy(); n != 0 {
		t.Errorf("%d renewal calls still in flight after RunRenewer returned, want 0", n)
	}
	for _, c := range rec.take() {
		if !errors.Is(c.err, context.Canceled) {
			t.Errorf("a stopped renewal call ended with %v, want context.Canceled", c.err)
		}
	}
	if got := storetest.CounterValue(t, reg, "latchkey_keepalive_renewal_failures_total", "reason", "store"); got != 0 {
		t.Errorf(`failures{reason="store"} = %v after a stop, want 0`, got)
	}
	if got := storetest.CounterValue(t, reg, "latchkey_keepalive_renewals_total"); got != 0 {
		t.Errorf("renewals = %v, want 0", got)
	}
}

// opTimeoutMinute is a store that gives every call a minute.
var opTimeoutMinute = store.Config{OpTimeout: time.Minute}
