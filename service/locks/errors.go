package locks

import (
	"fmt"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// ErrNotOwner reports a token that does not own the lease it names. It
// wraps store.ErrConflict.
var ErrNotOwner = fmt.Errorf("%w: lease held by another token", store.ErrConflict)

func invalid(field, rule, format string, args ...any) error {
	return store.Invalid(field, rule, format, args...)
}

// ModeError reports an acquire whose mode (fair or not) differs from the
// mode of the lock while someone holds or waits for it. It wraps ErrConflict.
type ModeError struct {
	Name string
	Fair bool // the lock's mode: true when it is fair
}

func (e *ModeError) Error() string {
	if e.Fair {
		return "locks: lock " + e.Name + " is fair while it is held or waited for: acquire it with fair set to true"
	}
	return "locks: lock " + e.Name + " is not fair while it is held or waited for: acquire it without fair"
}

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *ModeError) Unwrap() error { return store.ErrConflict }

// HeldError reports that a lock is held by another token. It wraps
// ErrConflict.
type HeldError struct {
	Name       string
	RetryAfter time.Duration // the holder's remaining TTL
}

func (e *HeldError) Error() string { return "locks: lock " + e.Name + " is held" }

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *HeldError) Unwrap() error { return store.ErrConflict }

// UpgradeError reports a token holding the read lease of a read/write lock
// that asked for its write lease: upgrades are refused, as two readers
// upgrading at once would deadlock. It wraps ErrConflict.
type UpgradeError struct {
	Name string
}

func (e *UpgradeError) Error() string {
	return "locks: read/write lock " + e.Name + ": the token holds the read lease; release it before asking for write"
}

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *UpgradeError) Unwrap() error { return store.ErrConflict }
