// Package store is Latchkey's store layer, which knows no domain: the Lua
// script runner (EVALSHA, EVAL where NOSCRIPT came from, error translation), the
// pipelined client, the wait for replicas, the shared errors and name rules.
package store

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
	ErrInvalid = errors.New("store: invalid request")
	// ErrNotFound reports that what a request names does not exist (a
	// lease expired or released, an unknown policy); each domain's error
	// wrapping it says what was not found.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict reports a request that conflicts with the current state.
	ErrConflict = errors.New("store: conflict")
	// ErrUnavailable reports that the store could not be reached in time.
	ErrUnavailable = errors.New("store: unavailable")
)

// ValidationError names the request field that broke a rule. It wraps
// ErrInvalid.
type ValidationError struct {
	Field  string // JSON name of the field, or the header's name
	Rule   string // the rule broken: "required", "min", "max", "format", ...
	Detail string // a sentence for people
}

func (e *ValidationError) Error() string { return "store: invalid " + e.Field + ": " + e.Detail }

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// Invalid returns a *ValidationError for field.
func Invalid(field, rule, format string, args ...any) error {
	return &ValidationError{Field: field, Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

// QuotaError reports a tenant at one of its quotas (see TenantOf): its
// leases or waiters at once, counted by the lock service, or its request
// rate, counted at the edge. It wraps ErrConflict. Both domains report it,
// so it is declared here, as ValidationError is.
type QuotaError struct {
	Quota      string // leases, waiters or requests_per_second
	Limit      int64
	RetryAfter time.Duration // when a place may be free again: the first place's end
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("store: tenant quota of %d %s reached", e.Limit, e.Quota)
}

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *QuotaError) Unwrap() error { return ErrConflict }
