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
		{"explicit sane values", locks.Config{MinTTL: time.Second, MaxTTL: time.Hour, DefaultTTL: time.Minute, FenceTTL: time.Hour}, ""},
		{"min above max", locks.Config{MinTTL: time.Hour, MaxTTL: time.Minute, DefaultTTL: time.Minute}, "min ttl 1h0m0s is above max ttl 1m0s"},
		{"default below min", locks.Config{MinTTL: time.Minute, DefaultTTL: time.Second}, "default ttl 1s is outside"},
		{"default above max", locks.Config{MaxTTL: time.Minute, DefaultTTL: 2 * time.Minute}, "default ttl 2m0s is outside [1ms, 1m0s]"},
		{"fence ttl below max ttl", locks.Config{MaxTTL: 48 * time.Hour, FenceTTL: time.Hour}, "fence ttl 1h0m0s must be at least the max ttl 48h0m0s"},
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
