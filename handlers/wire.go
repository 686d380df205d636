package handlers

// The bytes Latchkey writes by hand: the lease and decision JSON (every
// acquire, renewal and gateway request answers one, and building them
// without reflection keeps it off those paths), the gate's answer, the
// rate-limit headers and the roundings they use, and the headers of every
// JSON answer. wire_test.go holds them byte for byte to what encoding/json
// and the drafts write.

import (
	"encoding/json"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
)

// Header values shared by every JSON answer, set without canonicalizing
// their names or allocating a slice per request; net/http only reads them.
var (
	jsonContentType = []string{"application/json"}
	noStore         = []string{"no-store"}
)

// writeJSON answers v as JSON with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	writeJSONHeader(w, status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeJSONHeader sends the status and the headers of every JSON answer.
func writeJSONHeader(w http.ResponseWriter, status int) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Cache-Control"] = noStore
	w.WriteHeader(status)
}

// zeroLength is the Content-Length of a gate answer without a body.
var zeroLength = []string{"0"}

// appendLeaseJSON appends l as the JSON object encoding/json would write,
// followed by a newline. Every acquire and renewal answers one; building it
// by hand keeps reflection off the lock path. Names and tokens are validated
// ASCII without HTML characters, so HTML escaping would change nothing.
func appendLeaseJSON(b []byte, l leaseResponse) []byte {
	b = appendJSONString(b, `{"name":`, l.Name)
	if l.Token != "" {
		b = appendJSONString(b, `,"token":`, l.Token)
	}
	b = appendInt(b, `,"fence":`, l.Fence)
	b = appendInt(b, `,"hold_count":`, l.HoldCount)
	b = appendInt(b, `,"ttl_ms":`, l.TTLMS)
	b = appendJSONTime(b, `,"expires_at":`, l.ExpiresAt)
	b = strconv.AppendBool(append(b, `,"reentrant":`...), l.Reentrant)
	b = appendKeepaliveJSON(b, l.Keepalive)
	if l.Mode != "" {
		b = appendJSONString(b, `,"mode":`, l.Mode)
	}
	if l.WaitedMS != 0 {
		b = appendInt(b, `,"waited_ms":`, l.WaitedMS)
	}
	return append(b, "}\n"...)
}

// appendElectionLeaseJSON appends l as the JSON object encoding/json would
// write, followed by a newline: every campaign answers one, so reflection
// stays off the election's path as off the lock's.
func appendElectionLeaseJSON(b []byte, l electionLeaseResponse) []byte {
	b = appendJSONString(b, `{"name":`, l.Name)
	if l.Token != "" {
		b = appendJSONString(b, `,"token":`, l.Token)
	}
	b = appendInt(b, `,"term":`, l.Term)
	b = appendInt(b, `,"fence":`, l.Fence)
	if l.Value != nil {
		b = appendJSONText(b, `,"value":`, *l.Value)
	}
	if l.Owner != "" {
		b = appendJSONText(b, `,"owner":`, l.Owner)
	}
	b = appendInt(b, `,"ttl_ms":`, l.TTLMS)
	b = appendJSONTime(b, `,"expires_at":`, l.ExpiresAt)
	b = strconv.AppendBool(append(b, `,"reentrant":`...), l.Reentrant)
	b = appendKeepaliveJSON(b, l.Keepalive)
	if l.WaitedMS != 0 {
		b = appendInt(b, `,"waited_ms":`, l.WaitedMS)
	}
	return append(b, "}\n"...)
}

// appendKeepaliveJSON appends a lease's keepalive member, when it has one.
func appendKeepaliveJSON(b []byte, ka *keepaliveResponse) []byte {
	if ka == nil {
		return b
	}
	b = appendJSONTime(b, `,"keepalive":{"max_hold_until":`, ka.MaxHoldUntil)
	if ka.HeartbeatMS != 0 {
		b = appendInt(b, `,"heartbeat_ms":`, ka.HeartbeatMS)
	}
	if ka.HeartbeatDue != nil {
		b = appendJSONTime(b, `,"heartbeat_due":`, *ka.HeartbeatDue)
	}
	return append(b, '}')
}

// appendJSONText appends prefix and s, any text (a leader's value, an
// owner), as encoding/json writes a string: printable ASCII without HTML
// characters is copied, anything else goes through encoding/json.
func appendJSONText(b []byte, prefix, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(append(b, prefix...), q...)
		}
	}
	return append(append(append(append(b, prefix...), '"'), s...), '"')
}

// appendJSONTime appends prefix and t as time.Time's MarshalJSON does: RFC
// 3339 with the fraction of a second it has, quoted. Lease times are years
// from now, well inside the years MarshalJSON accepts.
func appendJSONTime(b []byte, prefix string, t time.Time) []byte {
	b = append(b, prefix...)
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// bodyBuffers hold the hand-built JSON bodies while they are written: a
// writer keeps none of what it is given (io.Writer's contract), so the
// buffer is used again by the next answer.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// writeBody sends the body build makes of v, from a pooled buffer.
func writeBody[T any](w http.ResponseWriter, v T, build func([]byte, T) []byte) {
	bp := bodyBuffers.Get().(*[]byte)
	b := build((*bp)[:0], v)
	_, _ = w.Write(b)
	if cap(b) <= 4<<10 { // a rare large body does not stay in the pool
		*bp = b[:0]
		bodyBuffers.Put(bp)
	}
}

// writeLeaseJSON answers l with the given status.
func writeLeaseJSON(w http.ResponseWriter, status int, l leaseResponse) {
	writeJSONHeader(w, status)
	writeBody(w, l, appendLeaseJSON)
}

// writeElectionLeaseJSON sends l with status, as writeLeaseJSON does.
func writeElectionLeaseJSON(w http.ResponseWriter, status int, l electionLeaseResponse) {
	writeJSONHeader(w, status)
	writeBody(w, l, appendElectionLeaseJSON)
}

// appendDecisionJSON appends d as the JSON object encoding/json would write
// (without HTML escaping), followed by a newline. Every gateway request
// answers one; building it by hand keeps reflection off that path.
func appendDecisionJSON(b []byte, d decisionResponse) []byte {
	b = strconv.AppendBool(append(b, `{"allowed":`...), d.Allowed)
	b = appendInt(b, `,"limit":`, d.Limit)
	b = appendInt(b, `,"remaining":`, d.Remaining)
	b = appendInt(b, `,"reset_ms":`, d.ResetMS)
	b = appendInt(b, `,"retry_after_ms":`, d.RetryAfterMS)
	b = appendJSONString(b, `,"policy":`, d.Policy)
	b = appendJSONString(b, `,"key":`, d.Key)
	if d.Binding != "" {
		b = appendJSONString(b, `,"binding":`, d.Binding)
	}
	if d.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	return append(b, "}\n"...)
}

// appendJSONString appends prefix and s as a JSON string. Policy names and
// keys are validated ASCII; quotes, backslashes and control bytes are
// escaped, other bytes are copied.
func appendJSONString(b []byte, prefix, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, prefix...)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// appendInt appends prefix (a JSON member's `,"name":`, a header
// parameter's `;q=`) and n.
func appendInt(b []byte, prefix string, n int64) []byte {
	return strconv.AppendInt(append(b, prefix...), n, 10)
}

// writeDecisionJSON answers d with the given status.
func writeDecisionJSON(w http.ResponseWriter, status int, d decisionResponse) {
	writeJSONHeader(w, status)
	writeBody(w, d, appendDecisionJSON)
}

// writeGateDecision answers a decision of the gate. Gateways act on the
// status and the headers; nginx never reads the body of an auth_request
// subrequest, and an unread body costs it its keep-alive connection to
// Latchkey. So the gate sends a body only where it is read:
//   - HEAD: the status and headers, never a body;
//   - Accept lists application/json (q > 0): the decision JSON, allowed or
//     denied, as POST /v1/ratelimit/check answers it;
//   - otherwise, allowed: 200 with Content-Length: 0; denied: a rate-limited
//     problem (application/problem+json), which Traefik's ForwardAuth and
//     Envoy's ext_authz hand on to the client with the denial.
func (a *api) writeGateDecision(w http.ResponseWriter, r *http.Request, denyStatus int, d ratelimit.Decision) error {
	h := w.Header()
	setRateLimitHeaders(h, d, a.cfg.RateLimit.LegacyHeaders)
	status := http.StatusOK
	if !d.Allowed {
		status = denyStatus
	}
	switch {
	case r.Method == http.MethodHead:
		h["Cache-Control"] = noStore
		w.WriteHeader(status)
	case acceptsJSON(r.Header["Accept"]):
		writeDecisionJSON(w, status, toDecisionResponse(d))
	case d.Allowed:
		h["Cache-Control"] = noStore
		h["Content-Length"] = zeroLength
		w.WriteHeader(status)
	default:
		return &httpError{typ: rateLimited, status: denyStatus,
			detail: "rate limit " + strconv.Quote(d.Policy) + bindingDetail(d) + " of " + strconv.FormatInt(d.Limit, 10) + " per " +
				strconv.FormatInt(ceilSeconds(d.Window), 10) + "s reached; retry after " + retryAfterSeconds(d.RetryAfter) + "s"}
	}
	return nil
}

// bindingDetail names the binding limit of a multi-limit decision in a
// denial's detail; "" for a single-limit one.
func bindingDetail(d ratelimit.Decision) string {
	if d.Binding == "" {
		return ""
	}
	return " (limit " + strconv.Quote(d.Binding) + ")"
}

// acceptsJSON reports whether Accept header values list application/json
// with a non-zero quality. Wildcards (*/*, application/*) do not count:
// browsers and curl send them without asking for anything in particular.
func acceptsJSON(accept []string) bool {
	for _, v := range accept {
		if !strings.Contains(strings.ToLower(v), "application/json") {
			continue
		}
		for _, part := range strings.Split(v, ",") {
			mt, params, err := mime.ParseMediaType(part)
			if err != nil || mt != "application/json" {
				continue
			}
			if q, ok := params["q"]; ok {
				if f, err := strconv.ParseFloat(q, 64); err != nil || f <= 0 {
					continue
				}
			}
			return true
		}
	}
	return false
}

// setRateLimitHeaders writes the IETF draft headers of a decision
// (RateLimit-Policy: "name";q=limit;w=window-seconds and RateLimit:
// "name";r=remaining;t=reset-seconds), Retry-After on a denial (seconds,
// rounded up), the degraded marker on a fail-open answer, and the legacy
// X-RateLimit-* headers when asked to. Every gateway request answers the
// first two, so they are built in one buffer and go in under their
// canonical names.
//
// A multi-limit decision lists every limit in RateLimit-Policy, by the
// limits' names, and reports its binding limit (see ratelimit.Decision) in
// RateLimit and the legacy headers.
func setRateLimitHeaders(h http.Header, d ratelimit.Decision, legacy bool) {
	reset := ceilSeconds(d.ResetAfter)
	var buf [160]byte
	var b []byte
	var name int
	if d.Limits == nil {
		b = strconv.AppendQuote(buf[:0], d.Policy)
		name = len(b)
		b = appendInt(b, ";q=", d.Limit)
		b = appendInt(b, ";w=", ceilSeconds(d.Window))
	} else {
		b = buf[:0]
		for i, l := range d.Limits {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = strconv.AppendQuote(b, l.Name)
			b = appendInt(b, ";q=", l.Limit)
			b = appendInt(b, ";w=", ceilSeconds(l.Window))
		}
	}
	policyEnd := len(b)
	if d.Limits == nil {
		b = append(b, b[:name]...)
	} else {
		b = strconv.AppendQuote(b, d.Binding)
	}
	b = appendInt(b, ";r=", d.Remaining)
	b = appendInt(b, ";t=", reset)
	// One string holds both values, one after the other.
	all := string(b)
	vals := []string{all[:policyEnd], all[policyEnd:]}
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
	if !d.Allowed {
		h.Set("Retry-After", retryAfterSeconds(d.RetryAfter))
	}
	if d.Degraded {
		h.Set(degradedHeader, "store-unavailable")
	}
	if d.WouldDeny {
		h[shadowHeader] = wouldDeny
	}
	if legacy {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
	}
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}
