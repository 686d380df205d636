package handlers

import (
	"net/http"
	"strconv"
	"time"
)

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
