package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Limiter asks the server for rate-limit decisions.
type Limiter struct{ c *Client }

// Limiter returns the rate limiter of the server.
func (c *Client) Limiter() *Limiter { return &Limiter{c: c} }

// Decision is the answer to a rate-limit check. A denial is a Decision with
// Allowed false, not an error.
type Decision struct {
	Allowed bool
	// Limit is the policy's limit per window.
	Limit int64
	// Remaining is what is left of the limit after this decision.
	Remaining int64
	// Reset is how long until the limit is whole again.
	Reset time.Duration
	// RetryAfter, for a denial, is how long until the same request would be
	// allowed.
	RetryAfter time.Duration
	// Policy and Key are what was decided on.
	Policy, Key string
	// Degraded marks a decision taken without the store (the policy fails
	// open).
	Degraded bool
}

type decisionJSON struct {
	Allowed      bool   `json:"allowed"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Policy       string `json:"policy"`
	Key          string `json:"key"`
	Degraded     bool   `json:"degraded"`
}

type checkBody struct {
	Policy string `json:"policy"`
	Key    string `json:"key,omitempty"`
	Cost   int64  `json:"cost,omitempty"`
}

// Check asks whether cost units (0 means 1) of the policy may be used for
// key (empty: the caller's own address, as the policy says) and uses them if
// so. A denial consumes nothing. A check is not retried once its request
// was sent: a retry could count twice. Returns a *Problem with type
// policy-not-found for an unknown policy, an *InvalidRequestError for a bad
// argument and ErrUnavailable (wrapped) when the server could not answer
// (or the policy fails closed).
func (lim *Limiter) Check(ctx context.Context, policy, key string, cost int64) (Decision, error) {
	req := request{method: http.MethodPost, path: "/v1/ratelimit/check", body: checkBody{Policy: policy, Key: key, Cost: cost}}
	resp, err := lim.c.do(ctx, req, false)
	var p *Problem
	if err != nil && !(errors.As(err, &p) && resp.status == http.StatusTooManyRequests &&
		!strings.HasPrefix(resp.header.Get("Content-Type"), "application/problem+json")) {
		return Decision{}, err
	}
	var dj decisionJSON
	if err := decode(req, resp, &dj); err != nil {
		return Decision{}, err
	}
	return Decision{Allowed: dj.Allowed, Limit: dj.Limit, Remaining: dj.Remaining,
		Reset: time.Duration(dj.ResetMS) * time.Millisecond, RetryAfter: time.Duration(dj.RetryAfterMS) * time.Millisecond,
		Policy: dj.Policy, Key: dj.Key, Degraded: dj.Degraded}, nil
}

// ErrWouldExceedDeadline is returned by Wait when the next chance of being
// allowed comes after ctx's deadline: Wait returns at once rather than
// sleeping in vain.
var ErrWouldExceedDeadline = errors.New("client: rate limit would not allow it before the context's deadline")

// Wait checks as Check does until the check is allowed, sleeping for each
// denial's RetryAfter in between, and returns the allowing decision. It is
// bounded by ctx: it returns the context's error when ctx ends, and
// ErrWouldExceedDeadline (with the last denial) when the next try would
// come after ctx's deadline. Returns the errors of Check.
func (lim *Limiter) Wait(ctx context.Context, policy, key string, cost int64) (Decision, error) {
	for {
		d, err := lim.Check(ctx, policy, key, cost)
		if err != nil || d.Allowed {
			return d, err
		}
		pause := max(d.RetryAfter, time.Millisecond)
		if dl, ok := ctx.Deadline(); ok && time.Now().Add(pause).After(dl) {
			return d, fmt.Errorf("%w: retry after %s", ErrWouldExceedDeadline, pause)
		}
		if err := sleep(ctx, pause); err != nil {
			return d, err
		}
	}
}
