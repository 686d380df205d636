package main

import (
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

// Each scenario driven as the ceiling was notes its CPU a request beside
// the ceiling's, and the ratio that CPU bounds it to; a scenario of another
// load generator, or without a load generator's CPU, notes nothing.
func TestCPUBudgetNotesEachScenarioAgainstTheCeiling(t *testing.T) {
	results := []Result{
		{Scenario: "ceiling", Driver: driverGo, Requests: 100000, Usage: usage{ServerCPUSeconds: 2, LoadgenCPUSeconds: 2}},
		{Scenario: "gate", Driver: driverGo, Requests: 50000, Usage: usage{ServerCPUSeconds: 1.5, RedisCPUSeconds: 0.5, LoadgenCPUSeconds: 1.5}},
		{Scenario: "lock", Driver: "wrk", Requests: 50000, Usage: usage{ServerCPUSeconds: 1.5, LoadgenCPUSeconds: 1}},
		{Scenario: "nginx", Driver: driverGo, Requests: 50000},
	}
	cpuBudget(results)
	want := []string{"CPU a request: server 30.0 µs, Redis 10.0 µs, load generator 30.0 µs: 70.0 µs against the ceiling's 40.0 (0.57)"}
	if diff := cmp.Diff(want, results[1].Notes); diff != "" {
		t.Errorf("gate's notes (-want +got):\n%s", diff)
	}
	for _, r := range []Result{results[0], results[2], results[3]} {
		if r.Notes != nil {
			t.Errorf("%s's notes = %q, want none", r.Scenario, r.Notes)
		}
	}
}
