package handlers

import (
	"net/http"
	"strconv"
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
