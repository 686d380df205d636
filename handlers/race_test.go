//go:build race

package handlers_test

// raceSlack is how many more allocations per request the allocation
// counts allow under the race detector, whose sync.Pool drops items at
// random so that pooled buffers are now and then made anew.
const raceSlack = 2
