package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// -fence-retention (LATCHKEY_FENCE_RETENTION) bounds how long a lock name's
// keys outlive its last lease; a lease longer than it keeps them the longer.
func TestFenceRetentionSetting(t *testing.T) {
	tests := []struct {
		desc      string
		env, args []string
		want      time.Duration
		wantErr   string // "": valid
	}{
		{desc: "default: an hour", want: time.Hour},
		{desc: "from the environment", env: []string{"LATCHKEY_FENCE_RETENTION", "2h", "LATCHKEY_MAX_HOLD_CAP", "2h"},
			want: 2 * time.Hour},
		{desc: "flag over the environment", env: []string{"LATCHKEY_FENCE_RETENTION", "2h"},
			args: []string{"-fence-retention", "48h"}, want: 48 * time.Hour},
		{desc: "as long as the leases", args: []string{"-fence-retention", "1h", "-max-ttl", "1h", "-max-hold", "1h", "-max-hold-cap", "1h"},
			want: time.Hour},
		{desc: "below -max-ttl and -max-hold-cap", args: []string{"-fence-retention", "10m"}, want: 10 * time.Minute},
		{desc: "zero", args: []string{"-fence-retention", "0s"}, wantErr: "-fence-retention must be positive, got 0s"},
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
