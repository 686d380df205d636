package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5/middleware"
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
}

// FieldError names one request field and the rule it broke.
type FieldError struct {
	Field  string `json:"field"`
	Rule   string `json:"rule"`
	Detail string `json:"detail,omitempty"`
}

// httpError is an error raised by the HTTP layer itself (bad media type,
// bad JSON, missing credential). It carries its own status and type.
type httpError struct {
	status int
	typ    string
	detail string
	fields []FieldError
}

func (e *httpError) Error() string { return e.detail }

func badRequest(field, rule, detail string) error {
	return &httpError{status: http.StatusBadRequest, typ: "invalid-request", detail: detail,
		fields: []FieldError{{Field: field, Rule: rule, Detail: detail}}}
}

// problemRule maps one class of error to a status and problem type.
type problemRule struct {
	match  func(error) bool
	status int
	typ    string
}

func is(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }

func as[T error]() func(error) bool {
	return func(err error) bool { var t T; return errors.As(err, &t) }
}

// problemTable is the one mapping from errors to HTTP statuses. The first
// matching rule wins, so specific errors come before the sentinels they wrap.
var problemTable = []problemRule{
	{as[*ratelimit.PolicyNotFoundError](), http.StatusNotFound, "policy-not-found"},
	{as[*locks.HeldError](), http.StatusConflict, "lock-held"},
	{as[*locks.ModeError](), http.StatusConflict, "lock-mode-mismatch"},
	{is(locks.ErrNotOwner), http.StatusConflict, "not-owner"},
	{is(store.ErrInvalid), http.StatusBadRequest, "invalid-request"},
	{as[validator.ValidationErrors](), http.StatusBadRequest, "invalid-request"},
	{is(store.ErrNotFound), http.StatusNotFound, "lease-not-found"},
	{is(store.ErrConflict), http.StatusConflict, "conflict"},
	{as[*http.MaxBytesError](), http.StatusRequestEntityTooLarge, "payload-too-large"},
	{is(store.ErrUnavailable), http.StatusServiceUnavailable, "store-unavailable"},
	{is(context.DeadlineExceeded), http.StatusServiceUnavailable, "store-unavailable"},
}

var titles = map[string]string{
	"lock-held":          "Lock is held by another owner",
	"lock-mode-mismatch": "Lock is in the other mode (fair or not)",
	"not-owner":          "Lock-Token does not own this lease",
	"invalid-request":    "Invalid request",
	"lease-not-found":    "Lease not found",
	"conflict":           "Conflict",
	"payload-too-large":  "Request body too large",
	"unsupported-media":  "Unsupported media type",
	"store-unavailable":  "Store unavailable",
	"forbidden":          "Forbidden",
	"not-found":          "Not found",
	"method-not-allowed": "Method not allowed",
	"internal":           "Internal error",
	"policy-not-found":   "Rate-limit policy not found",
	"rate-limited":       "Too many requests",
}

// writeError answers err as problem+json. A caller that went away gets
// nothing; 5xx answers are logged once here.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	reqID := middleware.GetReqID(r.Context())
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		log.Debug("client went away", "request_id", reqID, "err", err)
		return
	}
	p := Problem{Type: "internal", Status: http.StatusInternalServerError, Detail: "internal error"}
	var he *httpError
	if errors.As(err, &he) {
		p = Problem{Type: he.typ, Status: he.status, Detail: he.detail, Errors: he.fields}
	} else {
		for _, rule := range problemTable {
			if rule.match(err) {
				p = Problem{Type: rule.typ, Status: rule.status, Detail: publicDetail(rule, err)}
				break
			}
		}
	}
	p.Errors = append(p.Errors, fieldErrors(err)...)
	var held *locks.HeldError
	switch {
	case errors.As(err, &held):
		w.Header().Set("Retry-After", retryAfterSeconds(held.RetryAfter))
	case p.Status == http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	}
	if p.Status >= 500 {
		log.Error("request failed", "request_id", reqID, "status", p.Status, "err", err)
	}
	p.Title = titles[p.Type]
	p.Instance = r.URL.Path
	p.RequestID = reqID
	writeProblem(w, p)
}

func writeProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// publicDetail is the detail a client may see: the error's own words for
// client errors, a fixed sentence for server-side ones.
func publicDetail(rule problemRule, err error) string {
	switch rule.typ {
	case "store-unavailable":
		var re *store.ReplicationError
		if errors.As(err, &re) {
			return re.Error() + "; inspect the lock before relying on the change"
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			return "the store refused the connection; try again"
		}
		return "the store did not answer in time; try again"
	case "lease-not-found":
		return "no lease with this name is held (it expired or was released)"
	case "not-owner":
		return "the lease is held by another token"
	case "lock-held":
		return "the lock is held by another owner"
	case "policy-not-found":
		var pe *ratelimit.PolicyNotFoundError
		errors.As(err, &pe)
		return "no rate-limit policy is named " + strconv.Quote(pe.Name)
	case "lock-mode-mismatch":
		var me *locks.ModeError
		if errors.As(err, &me) && me.Fair {
			return "the lock is fair while anyone holds or waits for it: acquire it with \"fair\": true, or when nobody holds or waits for it"
		}
		return "the lock is not fair while anyone holds or waits for it: acquire it without \"fair\": true, or when nobody holds or waits for it"
	case "payload-too-large":
		var mb *http.MaxBytesError
		errors.As(err, &mb)
		return "request body is larger than " + strconv.FormatInt(mb.Limit, 10) + " bytes"
	}
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

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}
