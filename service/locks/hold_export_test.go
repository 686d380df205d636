package locks

// HoldOutcome is holdOutcome, for its decision table test.
var HoldOutcome = holdOutcome

// Hints published on a lock's channel, as a hold stream receives them.
const (
	HintReleased  = hintReleased
	HintForced    = hintForced
	HintShortened = hintShortened
)
