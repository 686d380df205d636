package handlers

// The bytes Latchkey writes by hand: the lease and decision JSON (every
// acquire, renewal and gateway request answers one, and building them
// without reflection keeps it off those paths), the rate-limit headers and
// the roundings they use, and the headers of every JSON answer. wire_test.go
// holds them byte for byte to what encoding/json and the drafts write.

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
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
	b = append(b, `{"name":`...)
	b = appendJSONString(b, l.Name)
	if l.Token != "" {
		b = append(b, `,"token":`...)
		b = appendJSONString(b, l.Token)
	}
	b = append(b, `,"fence":`...)
	b = strconv.AppendInt(b, l.Fence, 10)
	b = append(b, `,"hold_count":`...)
	b = strconv.AppendInt(b, l.HoldCount, 10)
	b = append(b, `,"ttl_ms":`...)
	b = strconv.AppendInt(b, l.TTLMS, 10)
	b = append(b, `,"expires_at":`...)
	b = appendJSONTime(b, l.ExpiresAt)
	b = append(b, `,"reentrant":`...)
	b = strconv.AppendBool(b, l.Reentrant)
	if ka := l.Keepalive; ka != nil {
		b = append(b, `,"keepalive":{"max_hold_until":`...)
		b = appendJSONTime(b, ka.MaxHoldUntil)
		if ka.HeartbeatMS != 0 {
			b = append(b, `,"heartbeat_ms":`...)
			b = strconv.AppendInt(b, ka.HeartbeatMS, 10)
		}
		if ka.HeartbeatDue != nil {
			b = append(b, `,"heartbeat_due":`...)
			b = appendJSONTime(b, *ka.HeartbeatDue)
		}
		b = append(b, '}')
	}
	if l.Mode != "" {
		b = append(b, `,"mode":`...)
		b = appendJSONString(b, l.Mode)
	}
	return append(b, "}\n"...)
}

// appendJSONTime appends t as time.Time's MarshalJSON does: RFC 3339 with
// the fraction of a second it has, quoted. Lease times are years from now,
// well inside the years MarshalJSON accepts.
func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// writeLeaseJSON answers l with the given status.
func writeLeaseJSON(w http.ResponseWriter, status int, l leaseResponse) {
	writeJSONHeader(w, status)
	_, _ = w.Write(appendLeaseJSON(make([]byte, 0, 256), l))
}

// appendDecisionJSON appends d as the JSON object encoding/json would write
// (without HTML escaping), followed by a newline. Every gateway request
// answers one; building it by hand keeps reflection off that path.
func appendDecisionJSON(b []byte, d decisionResponse) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `,"reset_ms":`...)
	b = strconv.AppendInt(b, d.ResetMS, 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, d.RetryAfterMS, 10)
	b = append(b, `,"policy":`...)
	b = appendJSONString(b, d.Policy)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, d.Key)
	if d.Binding != "" {
		b = append(b, `,"binding":`...)
		b = appendJSONString(b, d.Binding)
	}
	if d.Degraded {
		b = append(b, `,"degraded":true`...)
	}
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string. Policy names and keys are
// validated ASCII; quotes, backslashes and control bytes are escaped, other
// bytes are copied.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
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

// writeDecisionJSON answers d with the given status.
func writeDecisionJSON(w http.ResponseWriter, status int, d decisionResponse) {
	writeJSONHeader(w, status)
	_, _ = w.Write(appendDecisionJSON(make([]byte, 0, 192), d))
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
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, d.Limit, 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, ceilSeconds(d.Window), 10)
	} else {
		b = buf[:0]
		for i, l := range d.Limits {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = strconv.AppendQuote(b, l.Name)
			b = append(b, ";q="...)
			b = strconv.AppendInt(b, l.Limit, 10)
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, ceilSeconds(l.Window), 10)
		}
	}
	policyEnd := len(b)
	if d.Limits == nil {
		b = append(b, b[:name]...)
	} else {
		b = strconv.AppendQuote(b, d.Binding)
	}
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
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
