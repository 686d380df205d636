package locks_test

import (
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  locks.Config
		want string // substring of the error; "" means valid
	}{
		{"zero value uses defaults", locks.Config{}, ""},
		{"explicit sane values", locks.Config{MinTTL: time.Second, MaxTTL: time.Hour, DefaultTTL: time.Minute,
			MaxHoldCap: time.Hour, FenceTTL: time.Hour}, ""},
		{"min above max", locks.Config{MinTTL: time.Hour, MaxTTL: time.Minute, DefaultTTL: time.Minute}, "min ttl 1h0m0s is above max ttl 1m0s"},
		{"default below min", locks.Config{MinTTL: time.Minute, DefaultTTL: time.Second}, "default ttl 1s is outside"},
		{"default above max", locks.Config{MaxTTL: time.Minute, DefaultTTL: 2 * time.Minute}, "default ttl 2m0s is outside [1ms, 1m0s]"},
		// The counter outlives each lease by the retention, whatever the lease's length.
		{"fence retention below max ttl", locks.Config{MaxTTL: 48 * time.Hour, FenceTTL: time.Hour}, ""},
		{"fence retention below max hold cap", locks.Config{MaxTTL: time.Hour, FenceTTL: time.Minute, LostTTL: time.Minute}, ""},
		{"lost reasons kept past the retention", locks.Config{MaxTTL: time.Minute, MaxHoldCap: time.Minute,
			DefaultMaxHold: time.Minute, FenceTTL: 10 * time.Minute, LostTTL: time.Hour},
			"lost ttl 1h0m0s must be at most the fence retention 10m0s"},
		{"default retention", locks.Config{MaxTTL: 48 * time.Hour}, ""},
		{"min keep-alive ttl of 3 polls", locks.Config{RenewPoll: 50 * time.Millisecond, MinKeepaliveTTL: 150 * time.Millisecond}, ""},
		{"min keep-alive ttl under 3 polls", locks.Config{MinKeepaliveTTL: 200 * time.Millisecond},
			"min keep-alive ttl 200ms must be at least 3 renewer polls (300ms)"},
		{"max ttl below the min keep-alive ttl: plain leases only", locks.Config{MaxTTL: 500 * time.Millisecond, DefaultTTL: 100 * time.Millisecond,
			MaxHoldCap: time.Hour, FenceTTL: time.Hour}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && err == nil:
				t.Fatalf("Validate() = nil, want an error containing %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("Validate() = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// A configuration started from DefaultConfig derives what follows other
// fields from them as set: a shorter fence retention shortens LostTTL, a
// shorter poll the shortest keep-alive TTL, as for a zero Config.
func TestDefaultConfigDerivesFromTheFieldsSet(t *testing.T) {
	cfg := locks.DefaultConfig()
	cfg.FenceTTL, cfg.RenewPoll = 10*time.Minute, 50*time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	_, rdb := newTestRedis(t)
	svc, err := newService(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := svc.Config()
	if got.LostTTL != 10*time.Minute || got.MinKeepaliveTTL != 500*time.Millisecond {
		t.Errorf("LostTTL, MinKeepaliveTTL = %s, %s, want 10m0s, 500ms", got.LostTTL, got.MinKeepaliveTTL)
	}
}
