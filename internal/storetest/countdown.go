package storetest

import (
	"slices"
	"testing"
)

// WantCountdown checks the remaining counts of the allowed decisions of one
// key, in any order: a limit of capacity spent by requests costing cost
// each, counted exactly, answers capacity-cost, capacity-2*cost, ... down
// to the last that fits, each once. name names the key in the error.
func WantCountdown(t testing.TB, name string, remaining []int64, capacity, cost int64) {
	t.Helper()
	var want []int64
	for r := capacity - cost; r >= 0; r -= cost {
		want = append(want, r)
	}
	got := slices.Clone(remaining)
	slices.Sort(got)
	slices.Reverse(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s (cost %d): allowed with remaining %v, want exactly %v", name, cost, got, want)
	}
}
