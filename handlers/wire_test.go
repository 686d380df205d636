package handlers_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/latchkey/latchkey/handlers"
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
