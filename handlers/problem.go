package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-playground/validator/v10"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
)

// Problem is an RFC 9457 problem details body. Type is one of the stable
// problem types documented in api/openapi.yaml.
type Problem struct {
	Type      string       `json:"type"`
	Title     string       `json:"title"`
	Status    int          `json:"status"`
	Detail    string       `json:"detail,omitempty"`
	Instance  string       `json:"instance,omitempty"`
	RequestID string       `json:"request_id,omitempty"`
	Errors    []FieldError `json:"errors,omitempty"`
	// Leader is the leader an election-held answer found (absent when the
	// election is vacant and a candidate that came first takes it).
	Leader *leaderResponse `json:"leader,omitempty"`
}

// FieldError names one request field and the rule it broke.
type FieldError struct {
	Field  string `json:"field"`
	Rule   string `json:"rule"`
	Detail string `json:"detail,omitempty"`
}

// problemType indexes problemTypes: one problem type Latchkey answers.
type problemType int

// The problem types, in the order their rows are matched against an error:
// specific errors come before the sentinels they wrap. Types without a
// match are raised by the HTTP layer itself (see httpError).
const (
	policyNotFound problemType = iota
	quotaExceeded
	electionHeld
	lockHeld
	permitsMismatch
	permitsUnavailable
	tokenInUse
	lockModeMismatch
	upgradeNotSupported
	notOwner
	invalidRequest
	leaseNotFound
	conflict
	payloadTooLarge
	headersTooLarge
	expectationFailed
	transferCodingNotSupported
	httpVersionNotSupported
	storeUnavailable
	unsupportedMedia
	forbidden
	unauthenticated
	routeNotFound
	methodNotAllowed
	rateLimited
	watchClientStreams
	watchInstanceStreams
	internal
)

// problemRow is everything answers of one problem type share.
type problemRow struct {
	typ    string // the type member, as api/openapi.yaml lists it
	title  string
	status int
	// match reports whether a service error has this type; nil for the
	// types only the HTTP layer raises.
	match func(error) bool
	// detail is the detail a client may see; nil means the error's own
	// words (the field rule's sentence for a validation error).
	detail func(error) string
	// header sets the headers this type's answers carry; nil sets none.
	header func(http.Header, error)
	// extend adds the type's extension members to p; nil adds none.
	extend func(p *Problem, err error)
}

// problemTypes is the one mapping from errors to problem answers: one row
// per problem type.
var problemTypes = [...]problemRow{
	policyNotFound: {typ: "policy-not-found", title: "Rate-limit policy not found", status: http.StatusNotFound,
		match: as[*ratelimit.PolicyNotFoundError](), detail: policyNotFoundDetail},
	electionHeld: {typ: "election-held", title: "Election has a leader", status: http.StatusConflict,
		match: as[*locks.ElectionHeldError](), detail: electionHeldDetail, header: electionRetryAfter,
		extend: electionLeader},
	lockHeld: {typ: "lock-held", title: "Lock is held by another owner", status: http.StatusConflict,
		match: as[*locks.HeldError](), detail: fixed("the lock is held by another owner"), header: heldRetryAfter},
	permitsMismatch: {typ: "permits-mismatch", title: "Semaphore has another number of permits", status: http.StatusConflict,
		match: as[*locks.PermitsMismatchError](), detail: permitsMismatchDetail},
	permitsUnavailable: {typ: "permits-unavailable", title: "Not enough permits are free", status: http.StatusConflict,
		match: as[*locks.PermitsUnavailableError](), detail: permitsUnavailableDetail, header: permitsRetryAfter},
	tokenInUse: {typ: "token-in-use", title: "Lock-Token already holds a lease here", status: http.StatusConflict,
		match: is(locks.ErrTokenInUse), detail: fixed("the Lock-Token already holds a lease on this semaphore: a lease is one acquisition, send another token or none")},
	lockModeMismatch: {typ: "lock-mode-mismatch", title: "Lock is in the other mode (fair or not)", status: http.StatusConflict,
		match: as[*locks.ModeError](), detail: modeMismatchDetail},
	upgradeNotSupported: {typ: "upgrade-not-supported", title: "Read lease cannot be upgraded to write", status: http.StatusConflict,
		match: as[*locks.UpgradeError](), detail: fixed("the token holds the read lease: release it, then ask for the write lease")},
	notOwner: {typ: "not-owner", title: "Lock-Token does not own this lease", status: http.StatusConflict,
		match: is(locks.ErrNotOwner), detail: fixed("the lease is held by another token")},
	invalidRequest: {typ: "invalid-request", title: "Invalid request", status: http.StatusBadRequest,
		match: anyOf(is(store.ErrInvalid), as[validator.ValidationErrors]())},
	leaseNotFound: {typ: "lease-not-found", title: "Lease not found", status: http.StatusNotFound,
		match: is(store.ErrNotFound), detail: fixed("no lease with this name is held (it expired or was released)")},
	conflict: {typ: "conflict", title: "Conflict", status: http.StatusConflict,
		match: is(store.ErrConflict)},
	payloadTooLarge: {typ: "payload-too-large", title: "Request body too large", status: http.StatusRequestEntityTooLarge,
		match: as[*http.MaxBytesError](), detail: tooLargeDetail},
	headersTooLarge: {typ: "headers-too-large", title: "Request headers too large",
		status: http.StatusRequestHeaderFieldsTooLarge},
	expectationFailed: {typ: "expectation-failed", title: "Expectation not supported",
		status: http.StatusExpectationFailed},
	transferCodingNotSupported: {typ: "transfer-coding-not-supported", title: "Transfer coding not supported",
		status: http.StatusNotImplemented},
	httpVersionNotSupported: {typ: "http-version-not-supported", title: "HTTP version not supported",
		status: http.StatusHTTPVersionNotSupported},
	storeUnavailable: {typ: "store-unavailable", title: "Store unavailable", status: http.StatusServiceUnavailable,
		match:  anyOf(is(store.ErrUnavailable), is(context.DeadlineExceeded), as[*interruptedError]()),
		detail: unavailableDetail, header: retryAfterOne},
	unsupportedMedia: {typ: "unsupported-media", title: "Unsupported media type", status: http.StatusUnsupportedMediaType},
	forbidden: {typ: "forbidden", title: "Forbidden", status: http.StatusForbidden,
		header: challenge},
	unauthenticated: {typ: "unauthenticated", title: "Unauthenticated", status: http.StatusUnauthorized,
		header: challenge},
	quotaExceeded: {typ: "quota-exceeded", title: "Tenant quota exceeded", status: http.StatusTooManyRequests,
		match: as[*store.QuotaError](), detail: quotaDetail, header: quotaRetryAfter},
	routeNotFound: {typ: "not-found", title: "Not found", status: http.StatusNotFound},
	methodNotAllowed: {typ: "method-not-allowed", title: "Method not allowed", status: http.StatusMethodNotAllowed,
		header: allow},
	rateLimited: {typ: "rate-limited", title: "Too many requests", status: http.StatusTooManyRequests},
	watchClientStreams: {typ: "watch-streams-per-client", title: "Too many watch streams for this client",
		status: http.StatusTooManyRequests},
	watchInstanceStreams: {typ: "watch-streams-exhausted", title: "This instance serves no more watch streams",
		status: http.StatusServiceUnavailable, header: retryAfterOne},
	internal: {typ: "internal", title: "Internal error", status: http.StatusInternalServerError,
		detail: fixed("internal error")},
}

// httpError is an error raised by the HTTP layer itself (bad media type,
// bad JSON, missing credential, no route): its problem type and detail.
type httpError struct {
	typ    problemType
	detail string
	fields []FieldError
	// status replaces the type's status when not zero: a rate-limit
	// policy names the status of its denials.
	status int
	// challenge is the WWW-Authenticate header of a 401 or 403.
	challenge string
	// allow are the methods the Allow header of a 405 lists.
	allow []string
}

func (e *httpError) Error() string { return e.detail }

// badRequest is an invalid-request error naming the field and the rule it broke.
func badRequest(field, rule, detail string) error {
	return &httpError{typ: invalidRequest, detail: detail,
		fields: []FieldError{{Field: field, Rule: rule, Detail: detail}}}
}

// interruptedError is a wait or a hold cut short by a shutdown: answered
// store-unavailable (never an empty answer that could pass for a grant),
// and not a failure worth an error log.
type interruptedError struct{ err error }

func (e *interruptedError) Error() string { return "interrupted: " + e.err.Error() }

// panicError is a handler's panic, answered as an internal error.
type panicError struct{ value any }

func (e *panicError) Error() string { return "panic" }

func is(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }

func as[T error]() func(error) bool {
	return func(err error) bool { var t T; return errors.As(err, &t) }
}

func anyOf(matches ...func(error) bool) func(error) bool {
	return func(err error) bool {
		for _, m := range matches {
			if m(err) {
				return true
			}
		}
		return false
	}
}

func fixed(detail string) func(error) string { return func(error) string { return detail } }

// problemOf is the answer to err: its problem type's row and the body
// (without instance and request ID).
func problemOf(err error) (problemRow, Problem) {
	var he *httpError
	if errors.As(err, &he) {
		row := problemTypes[he.typ]
		p := Problem{Type: row.typ, Title: row.title, Status: row.status, Detail: he.detail, Errors: he.fields}
		if he.status != 0 {
			p.Status = he.status
		}
		return row, p
	}
	row := problemTypes[internal]
	for _, r := range problemTypes {
		if r.match != nil && r.match(err) {
			row = r
			break
		}
	}
	p := Problem{Type: row.typ, Title: row.title, Status: row.status, Errors: fieldErrors(err)}
	if row.detail != nil {
		p.Detail = row.detail(err)
	} else {
		p.Detail = ownDetail(err)
	}
	if row.extend != nil {
		row.extend(&p, err)
	}
	return row, p
}

// writeError answers err as problem+json. A caller that went away gets
// nothing; 5xx answers are logged once here.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	reqID := requestIDOf(r.Context())
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		log.Debug("client went away", "request_id", reqID, "err", err)
		return
	}
	var ie *interruptedError
	switch status := writeProblem(w, r, err); {
	case errors.As(err, &ie):
		log.Debug("wait interrupted", "request_id", reqID, "err", ie.err)
	case status >= 500:
		log.Error("request failed", "request_id", reqID, "status", status, "err", err)
	}
}

// writeProblem writes the problem+json answer to err, with its type's
// headers, and returns its status. It logs nothing (see writeError).
func writeProblem(w http.ResponseWriter, r *http.Request, err error) int {
	row, p := problemOf(err)
	if row.header != nil {
		row.header(w.Header(), err)
	}
	p.Instance = r.URL.Path
	p.RequestID = requestIDOf(r.Context())
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
	return p.Status
}

// ownDetail is a client error's own words: the sentence of the rule it
// broke, or its message.
func ownDetail(err error) string {
	var ve *store.ValidationError
	if errors.As(err, &ve) {
		return ve.Detail
	}
	var vv validator.ValidationErrors
	if errors.As(err, &vv) && len(vv) > 0 {
		return validationDetail(vv[0])
	}
	return err.Error()
}

func fieldErrors(err error) []FieldError {
	var ve *store.ValidationError
	if errors.As(err, &ve) {
		return []FieldError{{Field: ve.Field, Rule: ve.Rule, Detail: ve.Detail}}
	}
	var vv validator.ValidationErrors
	if errors.As(err, &vv) {
		out := make([]FieldError, 0, len(vv))
		for _, fe := range vv {
			out = append(out, FieldError{Field: fe.Field(), Rule: fe.Tag(), Detail: validationDetail(fe)})
		}
		return out
	}
	return nil
}

func policyNotFoundDetail(err error) string {
	var pe *ratelimit.PolicyNotFoundError
	errors.As(err, &pe)
	return "no rate-limit policy is named " + store.Quote(pe.Name)
}

func modeMismatchDetail(err error) string {
	var me *locks.ModeError
	if errors.As(err, &me) && me.Fair {
		return "the lock is fair while anyone holds or waits for it: acquire it with \"fair\": true, or when nobody holds or waits for it"
	}
	return "the lock is not fair while anyone holds or waits for it: acquire it without \"fair\": true, or when nobody holds or waits for it"
}

func tooLargeDetail(err error) string {
	var mb *http.MaxBytesError
	errors.As(err, &mb)
	return "request body is larger than " + strconv.FormatInt(mb.Limit, 10) + " bytes"
}

// unavailableDetail says what happened without the store's internals.
func unavailableDetail(err error) string {
	var ie *interruptedError
	if errors.As(err, &ie) {
		return "the wait was interrupted (the server is shutting down); try again"
	}
	var re *store.ReplicationError
	if errors.As(err, &re) {
		return re.Error() + "; inspect the lock before relying on the change"
	}
	if errors.Is(err, locks.ErrHoldLapsed) {
		return "the lease ran out before the hold could report it (the store answered slowly); try again"
	}
	if errors.Is(err, store.ErrSlotMoved) {
		return "the store moved the name to another node (a failover or a slot move); try again"
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "the store refused the connection; try again"
	}
	return "the store did not answer in time; try again"
}

// electionHeldDetail says who leads, without the value (it is in leader).
func electionHeldDetail(err error) string {
	var eh *locks.ElectionHeldError
	if errors.As(err, &eh) && eh.Leader != nil {
		return "the election has a leader (term " + strconv.FormatInt(eh.Leader.Term, 10) + ")"
	}
	return "the election is vacant, and a candidate that came first takes it"
}

// electionRetryAfter tells a candidate when the leadership may be vacant.
func electionRetryAfter(h http.Header, err error) {
	var eh *locks.ElectionHeldError
	errors.As(err, &eh)
	h.Set("Retry-After", retryAfterSeconds(eh.RetryAfter))
}

// electionLeader puts the leader an election-held answer found in p.
func electionLeader(p *Problem, err error) {
	var eh *locks.ElectionHeldError
	if errors.As(err, &eh) {
		p.Leader = toLeaderResponse(eh.Leader)
	}
}

// heldRetryAfter tells a client when the lock it found held may be free.
func heldRetryAfter(h http.Header, err error) {
	var held *locks.HeldError
	errors.As(err, &held)
	h.Set("Retry-After", retryAfterSeconds(held.RetryAfter))
}

func retryAfterOne(h http.Header, _ error) { h.Set("Retry-After", "1") }

// challenge sets the WWW-Authenticate header an authentication error names.
func challenge(h http.Header, err error) {
	var he *httpError
	if errors.As(err, &he) && he.challenge != "" {
		h.Set("WWW-Authenticate", he.challenge)
	}
}

// allow sets the Allow header of a 405: the methods its route serves.
func allow(h http.Header, err error) {
	var he *httpError
	if errors.As(err, &he) {
		h.Set("Allow", strings.Join(he.allow, ", "))
	}
}

func quotaDetail(err error) string {
	var qe *store.QuotaError
	errors.As(err, &qe)
	return "the tenant is at its quota of " + strconv.FormatInt(qe.Limit, 10) + " " + strings.ReplaceAll(qe.Quota, "_", " ") +
		"; retry after " + retryAfterSeconds(qe.RetryAfter) + "s"
}

// quotaRetryAfter tells a tenant at its quota when a place may be free.
func quotaRetryAfter(h http.Header, err error) {
	var qe *store.QuotaError
	errors.As(err, &qe)
	h.Set("Retry-After", retryAfterSeconds(qe.RetryAfter))
}
