package handlers_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/latchkey/latchkey/handlers"
)

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
