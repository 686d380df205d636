//go:build !race

package handlers_test

// raceSlack is 0 without the race detector (see race_test.go).
const raceSlack = 0
