package handlers_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/handlers"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// The hand-built lease JSON is byte for byte what encoding/json writes, with
// and without the token and each optional keep-alive field, for times with
// and without a fraction of a second and in other zones.
func TestAppendLeaseJSONMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 11, 23, 16, 0, 54, 780_000_000, time.UTC)
	due := at.Add(1500 * time.Microsecond)
	east := time.FixedZone("UTC+5:30", 5*3600+30*60)
	cases := []handlers.LeaseResponse{
		{},
		{Name: "orders", Token: "pBnuw_2Zql8FF8h-auKp3A", Fence: 1795449624780649, HoldCount: 1, TTLMS: 30000, ExpiresAt: at},
		{Name: "orders.eu:v2", Fence: 7, HoldCount: 3, TTLMS: 1, ExpiresAt: at.Truncate(time.Second), Reentrant: true},
		{Name: "queue", Token: "t", Fence: 8, HoldCount: 1, TTLMS: 2000, ExpiresAt: at, WaitedMS: 4012},
		{Name: "jobs", Token: "t", Fence: -1, ExpiresAt: at.In(east),
			Keepalive: &handlers.KeepaliveResponse{MaxHoldUntil: at.Add(time.Hour)}},
		{Name: "jobs", Fence: 1 << 62, HoldCount: 2, TTLMS: 3000, ExpiresAt: at.Add(time.Nanosecond),
			Keepalive: &handlers.KeepaliveResponse{MaxHoldUntil: at.Add(time.Hour), HeartbeatMS: 2000, HeartbeatDue: &due}},
		{Name: `quote"back\slash`, Token: "a\x01b", ExpiresAt: at,
			Keepalive: &handlers.KeepaliveResponse{MaxHoldUntil: at, HeartbeatDue: &due}},
	}
	for _, l := range cases {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(l); err != nil {
			t.Fatal(err)
		}
		if got := handlers.AppendLeaseJSON(nil, l); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("AppendLeaseJSON(%+v)\n got %s\nwant %s", l, got, want.Bytes())
		}
	}
}

// The hand-built leadership JSON is byte for byte what encoding/json
// writes, with and without the token, the value, the owner and the
// keep-alive, for values of any text (HTML characters, quotes, control
// bytes, non-ASCII and invalid UTF-8, which encoding/json escapes or
// replaces).
func TestAppendElectionLeaseJSONMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 11, 23, 16, 0, 54, 780_000_000, time.UTC)
	due := at.Add(1500 * time.Microsecond)
	text := func(s string) *string { return &s }
	cases := []handlers.ElectionLeaseResponse{
		{},
		{Name: "db-primary", Token: "pBnuw_2Zql8FF8h-auKp3A", Term: 1795449624780649, Fence: 1795449624780649,
			Value: text("10.0.0.7:5432"), Owner: "db-1", TTLMS: 30000, ExpiresAt: at},
		{Name: "db-primary", Term: 7, Fence: 7, Value: text(""), TTLMS: 1, ExpiresAt: at.Truncate(time.Second), Reentrant: true},
		{Name: "jobs", Token: "t", Term: 9, Fence: 9, ExpiresAt: at, WaitedMS: 4012,
			Keepalive: &handlers.KeepaliveResponse{MaxHoldUntil: at.Add(time.Hour), HeartbeatMS: 2000, HeartbeatDue: &due}},
		{Name: "web", Value: text(`<a href="x">&</a> \ "q"` + "\x01\u2028é\xff"), Owner: "node <1> & \"2\"", ExpiresAt: at},
	}
	for _, l := range cases {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(l); err != nil {
			t.Fatal(err)
		}
		if got := handlers.AppendElectionLeaseJSON(nil, l); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("AppendElectionLeaseJSON(%+v)\n got %s\nwant %s", l, got, want.Bytes())
		}
	}
}

// The hand-built decision JSON is byte for byte what encoding/json writes.
func TestAppendDecisionJSONMatchesEncodingJSON(t *testing.T) {
	cases := []handlers.DecisionResponse{
		{},
		{Allowed: true, Limit: 3, Remaining: 2, ResetMS: 10000, Policy: "per-ip", Key: "203.0.113.7"},
		{Limit: 3, ResetMS: 7894, RetryAfterMS: 7895, Policy: "inline", Key: "2001:db8:1::/64"},
		{Allowed: true, Limit: 1 << 40, Remaining: -1, Policy: "api-key", Key: `quote"back\slash|~!`, Degraded: true},
		{Policy: "ctl", Key: "a\x01b\x1f"},
	}
	for _, d := range cases {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(d); err != nil {
			t.Fatal(err)
		}
		if got := handlers.AppendDecisionJSON(nil, d); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("AppendDecisionJSON(%+v)\n got %s\nwant %s", d, got, want.Bytes())
		}
	}
}

// The rate-limit headers of a decision, byte for byte: seconds round up
// (a part of a second left is a whole second to wait), Retry-After only on
// a denial and at least 1, the legacy headers only when asked for.
func TestSetRateLimitHeaders(t *testing.T) {
	tests := []struct {
		desc   string
		d      ratelimit.Decision
		legacy bool
		want   http.Header
	}{
		{"allowed", ratelimit.Decision{Allowed: true, Policy: "per-ip", Limit: 3, Remaining: 2, Window: 10 * time.Second, ResetAfter: 9001 * time.Millisecond},
			false, http.Header{"Ratelimit-Policy": {`"per-ip";q=3;w=10`}, "Ratelimit": {`"per-ip";r=2;t=10`}}},
		{"denied, parts of seconds round up", ratelimit.Decision{Policy: "p", Limit: 5, Window: 1500 * time.Millisecond, ResetAfter: time.Millisecond, RetryAfter: 1001 * time.Millisecond},
			false, http.Header{"Ratelimit-Policy": {`"p";q=5;w=2`}, "Ratelimit": {`"p";r=0;t=1`}, "Retry-After": {"2"}}},
		{"denied, nothing left to wait", ratelimit.Decision{Policy: "p", Limit: 5, Window: time.Second},
			false, http.Header{"Ratelimit-Policy": {`"p";q=5;w=1`}, "Ratelimit": {`"p";r=0;t=0`}, "Retry-After": {"1"}}},
		{"degraded, legacy", ratelimit.Decision{Allowed: true, Degraded: true, Policy: `q"uote`, Limit: 7, Remaining: 6, Window: time.Minute, ResetAfter: time.Minute},
			true, http.Header{"Ratelimit-Policy": {`"q\"uote";q=7;w=60`}, "Ratelimit": {`"q\"uote";r=6;t=60`},
				"Latchkey-Ratelimit-Degraded": {"store-unavailable"},
				"X-Ratelimit-Limit":           {"7"}, "X-Ratelimit-Remaining": {"6"}, "X-Ratelimit-Reset": {"60"}}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got := http.Header{}
			handlers.SetRateLimitHeaders(got, tt.d, tt.legacy)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
		})
	}
}
