package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestWaitSettings(t *testing.T) {
	tests := []struct {
		desc    string
		env     []string
		args    []string
		wantErr string // empty: valid
	}{
		{desc: "defaults", env: nil},
		{desc: "from the environment", env: []string{"LATCHKEY_MAX_WAIT", "20s", "LATCHKEY_HOLD_PING", "5s"}},
		{desc: "max-wait at the write timeout", args: []string{"-max-wait", "90s"},
			wantErr: "-max-wait 1m30s plus -redis-timeout 2s must be below -write-timeout 1m30s"},
		{desc: "max-wait plus redis timeout past the write timeout", args: []string{"-max-wait", "30s", "-write-timeout", "31s"},
			wantErr: "must be below -write-timeout 31s"},
		{desc: "zero max-wait", args: []string{"-max-wait", "0s"}, wantErr: "-max-wait must be positive"},
		{desc: "zero hold-ping", args: []string{"-hold-ping", "0s"}, wantErr: "-hold-ping must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			c, err := parseConfig(tt.args, env(tt.env...), &bytes.Buffer{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseConfig = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseConfig = %v", err)
			}
			wantWait, wantPing := 60*time.Second, 15*time.Second
			if tt.env != nil {
				wantWait, wantPing = 20*time.Second, 5*time.Second
			}
			if c.MaxWait != wantWait || c.HoldPing != wantPing {
				t.Errorf("MaxWait, HoldPing = %s, %s; want %s, %s", c.MaxWait, c.HoldPing, wantWait, wantPing)
			}
		})
	}
}
