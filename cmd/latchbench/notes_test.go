package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The election's note sets its campaign/resign cycles beside the lock's,
// against the target of 0.9; it needs both scenarios in the run.
func TestElectionAgainstLockNotesTheRatio(t *testing.T) {
	results := []Result{
		{Scenario: "lock", RPS: 2000, RPSRatio: 0.5, Requests: 20000, Usage: usage{ServerCPUSeconds: 2}},
		{Scenario: "election", RPS: 1800, RPSRatio: 0.45, Requests: 18000, Usage: usage{ServerCPUSeconds: 2.7}},
	}
	electionAgainstLock(results)
	want := []string{"0.90× lock's ratio to the ceiling (target ≥ 0.9; 0.90× its requests a second); " +
		"server CPU per request 150.0 µs against lock's 100.0 (1.50×)"}
	if diff := cmp.Diff(want, results[1].Notes); diff != "" {
		t.Errorf("election's notes (-want +got):\n%s", diff)
	}
	if results[0].Notes != nil {
		t.Errorf("lock's notes = %q, want none", results[0].Notes)
	}
	alone := []Result{{Scenario: "election", RPS: 1800, RPSRatio: 0.45}}
	electionAgainstLock(alone)
	if alone[0].Notes != nil {
		t.Errorf("election without lock: notes %q, want none", alone[0].Notes)
	}
}

// Each scenario notes its CPU a request beside its paired ceiling rounds'
// (or, without them, the ceiling row's when the same load generator drove
// both), and the ratio that CPU bounds it to; a scenario of another load
// generator without paired rounds, one without a load generator's CPU, and
// the gateways (whose own note compares them with the gateway alone) note
// nothing.
func TestCPUBudgetNotesEachScenarioAgainstTheCeiling(t *testing.T) {
	results := []Result{
		{Scenario: "ceiling", Driver: driverGo, Requests: 100000, Usage: usage{ServerCPUSeconds: 2, LoadgenCPUSeconds: 2}},
		{Scenario: "gate", Driver: driverGo, Requests: 50000, Usage: usage{ServerCPUSeconds: 1.5, RedisCPUSeconds: 0.5, LoadgenCPUSeconds: 1.5}},
		{Scenario: "check", Driver: driverGo, Requests: 50000, CeilingCPUus: 35,
			Usage: usage{ServerCPUSeconds: 1.5, RedisCPUSeconds: 0.5, LoadgenCPUSeconds: 1.5}},
		{Scenario: "lock", Driver: "wrk", Requests: 50000, Usage: usage{ServerCPUSeconds: 1.5, LoadgenCPUSeconds: 1}},
		{Scenario: "nginx", Driver: driverGo, Requests: 50000, CeilingCPUus: 35, Usage: usage{ServerCPUSeconds: 1.5, LoadgenCPUSeconds: 1}},
	}
	cpuBudget(results)
	want := map[string][]string{
		"gate":  {"CPU a request: server 30.0 µs, Redis 10.0 µs, load generator 30.0 µs: 70.0 µs against the ceiling's 40.0 (0.57)"},
		"check": {"CPU a request: server 30.0 µs, Redis 10.0 µs, load generator 30.0 µs: 70.0 µs against its paired ceiling rounds' 35.0 (0.50)"},
	}
	for _, r := range results {
		if diff := cmp.Diff(want[r.Scenario], r.Notes); diff != "" {
			t.Errorf("%s's notes (-want +got):\n%s", r.Scenario, diff)
		}
	}
}

// The paired ceiling rounds' CPU a request sums every part of every round
// over their requests.
func TestPairedCeilingsCPUPerRequest(t *testing.T) {
	var c pairedCeilings
	if got := c.perRequest(); got != 0 {
		t.Errorf("no rounds: %v µs a request, want 0", got)
	}
	c.add(usage{ServerCPUSeconds: 1, RedisCPUSeconds: 0.1, LoadgenCPUSeconds: 0.9}, 40000)
	c.add(usage{ServerCPUSeconds: 0.5, LoadgenCPUSeconds: 0.5}, 20000)
	if got, want := c.perRequest(), 50.0; got != want {
		t.Errorf("two rounds: %v µs a request, want %v (3 s over 60,000 requests)", got, want)
	}
}

// A gateway scenario notes what a request costs each part, alone and
// gated, and the ratio of gated ÷ alone that CPU bounds it to; without the
// gateway's CPU (its processes unreadable) it notes nothing.
func TestGatewayCPUNotesEachSide(t *testing.T) {
	var c gatewayCPU
	t0 := cpuParts{gateway: 10, server: 100, redis: 50, loadgen: 20}
	t1 := cpuParts{gateway: 12, server: 100, redis: 50, loadgen: 21}       // alone: 100,000 requests
	t2 := cpuParts{gateway: 15.5, server: 103, redis: 50.5, loadgen: 21.5} // gated: 50,000 requests
	c.add(t0, t1, t2, 100000, 50000, 0.5, 0.5)
	want := []string{"CPU a request: nginx alone: nginx 20.0 µs, load generator 15.0 µs: 35.0 µs; " +
		"gated: nginx 70.0 µs, Latchkey 60.0 µs, Redis 10.0 µs, load generator 20.0 µs: 160.0 µs; the CPU bounds gated ÷ alone to 0.22"}
	if diff := cmp.Diff(want, c.note("nginx")); diff != "" {
		t.Errorf("nginx's CPU note (-want +got):\n%s", diff)
	}
	if got := (gatewayCPU{aloneReqs: 1, gatedReqs: 1}).note("nginx"); got != nil {
		t.Errorf("without the gateway's CPU: note %q, want none", got)
	}
}

// procTreeCPUSeconds counts a process's CPU with its children's: this test
// process's own, at least, less the ticks' rounding; none for no process.
func TestProcTreeCPUSecondsCountsTheProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc: not Linux")
	}
	for i := 0; ownCPUSeconds() < 0.05; i++ {
		_ = fmt.Sprint(i) // work, until the process has used some CPU
	}
	own := ownCPUSeconds()
	if got := procTreeCPUSeconds(os.Getpid()); got < own-0.02 {
		t.Errorf("procTreeCPUSeconds(self) = %.2f s, want at least this process's %.2f s", got, own)
	}
	if got := procTreeCPUSeconds(0); got != 0 {
		t.Errorf("procTreeCPUSeconds(0) = %v, want 0", got)
	}
}
