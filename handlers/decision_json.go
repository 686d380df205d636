package handlers

import (
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/latchkey/latchkey/service/ratelimit"
)

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

// zeroLength is the Content-Length of a gate answer without a body.
var zeroLength = []string{"0"}

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
func (a *api) writeGateDecision(w http.ResponseWriter, r *http.Request, denyStatus int, d ratelimit.Decision) {
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
		writeDecisionJSON(w, status, decisionResponse{
			Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
			ResetMS: ceilMillis(d.ResetAfter), RetryAfterMS: ceilMillis(d.RetryAfter),
			Policy: d.Policy, Key: d.Key, Degraded: d.Degraded,
		})
	case d.Allowed:
		h["Cache-Control"] = noStore
		h["Content-Length"] = zeroLength
		w.WriteHeader(status)
	default:
		writeError(w, r, a.log, &httpError{status: status, typ: "rate-limited",
			detail: "rate limit " + strconv.Quote(d.Policy) + " of " + strconv.FormatInt(d.Limit, 10) + " per " +
				strconv.FormatInt(ceilSeconds(d.Window), 10) + "s reached; retry after " + retryAfterSeconds(d.RetryAfter) + "s"})
	}
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
