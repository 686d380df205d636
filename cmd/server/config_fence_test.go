package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// -fence-retention (LATCHKEY_FENCE_RETENTION) bounds how long a lock name's
// keys outlive its last use; it may not be shorter than a lease can last.
func TestFenceRetentionSetting(t *testing.T) {
	tests := []struct {
		desc      string
		env, args []string
		want      time.Duration
		wantErr   string // "": valid
	}{
		{desc: "default: a day", want: 24 * time.Hour},
		{desc: "from the environment", env: []string{"LATCHKEY_FENCE_RETENTION", "2h", "LATCHKEY_MAX_HOLD_CAP", "2h"},
			want: 2 * time.Hour},
		{desc: "flag over the environment", env: []string{"LATCHKEY_FENCE_RETENTION", "2h"},
			args: []string{"-fence-retention", "48h"}, want: 48 * time.Hour},
		{desc: "as long as the leases", args: []string{"-fence-retention", "1h", "-max-ttl", "1h", "-max-hold", "1h", "-max-hold-cap", "1h"},
			want: time.Hour},
		{desc: "below -max-hold-cap", args: []string{"-fence-retention", "2h"},
			wantErr: "-fence-retention 2h0m0s must be at least -max-ttl 1h0m0s and -max-hold-cap 24h0m0s, so a lease never outlives its fence counter"},
		{desc: "below -max-ttl", args: []string{"-fence-retention", "30m", "-max-hold-cap", "30m", "-max-hold", "30m"},
			wantErr: "-fence-retention 30m0s must be at least -max-ttl 1h0m0s"},
		{desc: "zero", args: []string{"-fence-retention", "0s"}, wantErr: "-fence-retention 0s must be at least"},
		{desc: "not a duration", env: []string{"LATCHKEY_FENCE_RETENTION", "a day"},
			wantErr: `LATCHKEY_FENCE_RETENTION="a day" is not a duration`},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			c, err := parseConfig(tt.args, env(tt.env...), &bytes.Buffer{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseConfig = %v, want an error mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseConfig = %v", err)
			}
			if c.FenceRetention != tt.want {
				t.Errorf("FenceRetention = %s, want %s", c.FenceRetention, tt.want)
			}
		})
	}
}
