package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors, for errors.Is. The errors the client returns wrap one of
// them when the server answered with the matching problem type (or, for
// ErrUnavailable, did not answer at all).
var (
	// ErrHeld: the lock is held by another owner (problem type lock-held),
	// a semaphore has fewer free permits than asked for
	// (permits-unavailable), or another candidate leads an election
	// (election-held). The error is a *HeldError.
	ErrHeld = errors.New("client: lock is held by another owner")
	// ErrUpgradeNotSupported: a token holding the read lease of a
	// read/write lock asked for its write lease (upgrade-not-supported).
	ErrUpgradeNotSupported = errors.New("client: a read lease cannot be upgraded to write")
	// ErrPermitsMismatch: a semaphore was asked for with another capacity
	// than the one it has (permits-mismatch). The error is a
	// *PermitsMismatchError.
	ErrPermitsMismatch = errors.New("client: the semaphore has another number of permits")
	// ErrModeMismatch: the lock, read/write lock or semaphore is held or
	// waited for in the other fairness mode (lock-mode-mismatch).
	ErrModeMismatch = errors.New("client: the lock is in the other fairness mode")
	// ErrNotOwner: the lease's token does not own the lock (not-owner).
	ErrNotOwner = errors.New("client: the token does not own this lease")
	// ErrLeaseNotFound: no lease with this token (lease-not-found): it
	// expired or was released.
	ErrLeaseNotFound = errors.New("client: lease not found")
	// ErrUnavailable: the server or its store could not answer
	// (store-unavailable, any other 503, or a connection error).
	ErrUnavailable = errors.New("client: server unavailable")
	// ErrInvalidRequest: the server refused the request as invalid
	// (invalid-request). The error is an *InvalidRequestError.
	ErrInvalidRequest = errors.New("client: invalid request")
	// ErrRateLimited: the server refused the call itself for too many
	// requests (rate-limited, quota-exceeded). The error is a
	// *RateLimitedError. A denied rate-limit check is a Decision, not this.
	ErrRateLimited = errors.New("client: rate limited")

	// errTokenInUse: the token already holds a lease of the semaphore
	// (token-in-use). The client sends a fresh token with every acquire,
	// so only an earlier attempt of the same acquire can hold it.
	errTokenInUse = errors.New("client: the token already holds a lease of this semaphore")
)

// Problem is an error answer of the server (RFC 9457 problem details). Every
// error the server answers is a *Problem, found with errors.As; errors.Is
// matches it with the sentinel of its Type.
type Problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Detail    string         `json:"detail"`
	Instance  string         `json:"instance"`
	RequestID string         `json:"request_id"`
	Errors    []FieldProblem `json:"errors"`
	// RetryAfter is the answer's Retry-After header, when it has one.
	RetryAfter time.Duration `json:"-"`
	// Leader is the leader an election-held answer found, when it names one.
	Leader *Leader `json:"leader,omitempty"`
}

// FieldProblem names a request field the server refused and the rule it broke.
type FieldProblem struct {
	Field  string `json:"field"`
	Rule   string `json:"rule"`
	Detail string `json:"detail"`
}

func (p *Problem) Error() string {
	msg := p.Detail
	if msg == "" {
		msg = p.Title
	}
	if msg == "" {
		msg = http.StatusText(p.Status)
	}
	if p.Type == "" {
		return fmt.Sprintf("server answered %d: %s", p.Status, msg)
	}
	return fmt.Sprintf("server answered %d %s: %s", p.Status, p.Type, msg)
}

// Is reports whether target is the sentinel of p's type.
func (p *Problem) Is(target error) bool {
	switch target {
	case ErrHeld:
		return p.Type == "lock-held" || p.Type == "permits-unavailable" || p.Type == "election-held"
	case ErrUpgradeNotSupported:
		return p.Type == "upgrade-not-supported"
	case ErrPermitsMismatch:
		return p.Type == "permits-mismatch"
	case ErrModeMismatch:
		return p.Type == "lock-mode-mismatch"
	case errTokenInUse:
		return p.Type == "token-in-use"
	case ErrNotOwner:
		return p.Type == "not-owner"
	case ErrLeaseNotFound:
		return p.Type == "lease-not-found"
	case ErrUnavailable:
		return p.Status == http.StatusServiceUnavailable
	case ErrInvalidRequest:
		return p.Type == "invalid-request"
	case ErrRateLimited:
		return p.Type == "rate-limited" || p.Type == "quota-exceeded"
	}
	return false
}

// HeldError is returned when the lock is held by another owner, when a
// semaphore has fewer free permits than asked for, or when another
// candidate leads an election.
type HeldError struct {
	// RetryAfter is the holder's remaining TTL as the server rounds it (up,
	// to whole seconds): the earliest time worth trying again, unless the
	// holder releases sooner. For a semaphore, it is until the first of its
	// leases expires.
	RetryAfter time.Duration
	// Leader is the public state of an election's leader (never its
	// token); nil for a lock or a semaphore, and for an election found
	// vacant with a candidate that came first about to lead it.
	Leader  *Leader
	Problem *Problem
}

func (e *HeldError) Error() string { return e.Problem.Error() }

// Unwrap returns the server's problem, so errors.Is(err, ErrHeld) holds.
func (e *HeldError) Unwrap() error { return e.Problem }

// PermitsMismatchError is returned when a semaphore is asked for with
// another capacity than the one it has.
type PermitsMismatchError struct {
	// Permits is the semaphore's capacity, or 0 when it is not known (the
	// capacity changed again, or could not be read).
	Permits int64
	Problem *Problem
}

func (e *PermitsMismatchError) Error() string { return e.Problem.Error() }

// Unwrap returns the server's problem, so errors.Is(err, ErrPermitsMismatch) holds.
func (e *PermitsMismatchError) Unwrap() error { return e.Problem }

// InvalidRequestError is returned when the server refuses a request as
// invalid. Field names the first field at fault ("ttl", "Lock-Token", ...).
type InvalidRequestError struct {
	Field   string
	Rule    string
	Problem *Problem
}

func (e *InvalidRequestError) Error() string { return e.Problem.Error() }

// Unwrap returns the server's problem, so errors.Is(err, ErrInvalidRequest) holds.
func (e *InvalidRequestError) Unwrap() error { return e.Problem }

// RateLimitedError is returned when the server refuses a call for too many
// requests.
type RateLimitedError struct {
	RetryAfter time.Duration
	Problem    *Problem
}

func (e *RateLimitedError) Error() string { return e.Problem.Error() }

// Unwrap returns the server's problem, so errors.Is(err, ErrRateLimited) holds.
func (e *RateLimitedError) Unwrap() error { return e.Problem }

// errorOf turns a non-2xx answer into an error: a *HeldError (with the
// leader, for an election),
// *PermitsMismatchError, *InvalidRequestError or *RateLimitedError when the
// type says so, else the
// *Problem itself. An answer that is not problem+json still becomes a
// *Problem with its status.
func errorOf(req request, resp response) error {
	p := &Problem{Status: resp.status}
	if strings.HasPrefix(resp.header.Get("Content-Type"), "application/problem+json") {
		_ = json.Unmarshal(resp.body, p)
		p.Status = resp.status
	}
	if p.Detail == "" && p.Title == "" {
		p.Detail = fmt.Sprintf("%s %s answered %d %s", req.method, req.path, resp.status, http.StatusText(resp.status))
	}
	p.RetryAfter = retryAfter(resp.header)
	switch {
	case p.Is(ErrHeld):
		if p.Leader != nil {
			p.Leader.TTL = time.Duration(p.Leader.TTLMS) * time.Millisecond
		}
		return &HeldError{RetryAfter: p.RetryAfter, Leader: p.Leader, Problem: p}
	case p.Is(ErrPermitsMismatch):
		return &PermitsMismatchError{Problem: p}
	case p.Type == "invalid-request":
		e := &InvalidRequestError{Problem: p}
		if len(p.Errors) > 0 {
			e.Field, e.Rule = p.Errors[0].Field, p.Errors[0].Rule
		}
		return e
	case p.Is(ErrRateLimited):
		return &RateLimitedError{RetryAfter: p.RetryAfter, Problem: p}
	}
	return p
}

// retryAfter reads a Retry-After header given in seconds; zero when absent.
func retryAfter(h http.Header) time.Duration {
	if h == nil {
		return 0
	}
	s, err := strconv.ParseInt(strings.TrimSpace(h.Get("Retry-After")), 10, 64)
	if err != nil || s < 0 {
		return 0
	}
	return time.Duration(s) * time.Second
}
