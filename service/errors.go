package service

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Every error the service returns wraps one of them (or is a
// context error when the caller went away), so callers map errors with
// errors.Is and errors.As alone.
var (
	// ErrInvalid reports a request that breaks an invariant (bad name, token,
	// duration). Such a request changes nothing.
	ErrInvalid = errors.New("service: invalid request")
	// ErrNotFound reports a lease that does not exist (expired or released).
	ErrNotFound = errors.New("service: lease not found")
	// ErrConflict reports a request that conflicts with the current state.
	ErrConflict = errors.New("service: conflict")
	// ErrUnavailable reports that the store could not be reached in time.
	ErrUnavailable = errors.New("service: store unavailable")
	// ErrNotOwner reports a token that does not own the lease it names.
	ErrNotOwner = fmt.Errorf("%w: lease held by another token", ErrConflict)
)

// ValidationError names the request field that broke a rule. It wraps
// ErrInvalid.
type ValidationError struct {
	Field  string // JSON name of the field, or the header's name
	Rule   string // the rule broken: "required", "min", "max", "format", ...
	Detail string // a sentence for people
}

func (e *ValidationError) Error() string { return "service: invalid " + e.Field + ": " + e.Detail }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

func invalid(field, rule, format string, args ...any) error {
	return &ValidationError{Field: field, Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

// ModeError reports an acquire whose mode (fair or not) differs from the
// mode of the lock while someone holds or waits for it. It wraps ErrConflict.
type ModeError struct {
	Name string
	Fair bool // the lock's mode: true when it is fair
}

func (e *ModeError) Error() string {
	if e.Fair {
		return "service: lock " + e.Name + " is fair while it is held or waited for: acquire it with fair set to true"
	}
	return "service: lock " + e.Name + " is not fair while it is held or waited for: acquire it without fair"
}

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *ModeError) Unwrap() error { return ErrConflict }

// HeldError reports that a lock is held by another token. It wraps
// ErrConflict.
type HeldError struct {
	Name       string
	RetryAfter time.Duration // the holder's remaining TTL
}

func (e *HeldError) Error() string { return "service: lock " + e.Name + " is held" }

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *HeldError) Unwrap() error { return ErrConflict }
