package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestKeepaliveSettings(t *testing.T) {
	tests := []struct {
		desc         string
		env, args    []string
		wantHold     time.Duration
		wantHoldCap  time.Duration
		wantErrParts []string // nil: valid
	}{
		{desc: "defaults", wantHold: time.Hour, wantHoldCap: 24 * time.Hour},
		{desc: "from the environment", env: []string{"LATCHKEY_MAX_HOLD", "10m", "LATCHKEY_MAX_HOLD_CAP", "2h"},
			wantHold: 10 * time.Minute, wantHoldCap: 2 * time.Hour},
		{desc: "flags over the environment", env: []string{"LATCHKEY_MAX_HOLD", "10m"}, args: []string{"-max-hold", "5m"},
			wantHold: 5 * time.Minute, wantHoldCap: 24 * time.Hour},
		{desc: "default above the cap", args: []string{"-max-hold", "2h", "-max-hold-cap", "1h"},
			wantErrParts: []string{"-max-hold 2h0m0s is above -max-hold-cap 1h0m0s"}},
		{desc: "zero cap", args: []string{"-max-hold-cap", "0s"}, wantErrParts: []string{"-max-hold and -max-hold-cap must be positive"}},
		{desc: "not a duration", env: []string{"LATCHKEY_MAX_HOLD", "forever"},
			wantErrParts: []string{`LATCHKEY_MAX_HOLD="forever" is not a duration`}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			c, err := parseConfig(tt.args, env(tt.env...), &bytes.Buffer{})
			if tt.wantErrParts != nil {
				if err == nil {
					t.Fatalf("parseConfig = nil, want an error mentioning %q", tt.wantErrParts)
				}
				for _, w := range tt.wantErrParts {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("parseConfig = %v", err)
			}
			if c.MaxHold != tt.wantHold || c.MaxHoldCap != tt.wantHoldCap {
				t.Errorf("MaxHold, MaxHoldCap = %s, %s; want %s, %s", c.MaxHold, c.MaxHoldCap, tt.wantHold, tt.wantHoldCap)
			}
		})
	}
}

func TestRenewParallelSetting(t *testing.T) {
	tests := []struct {
		desc      string
		env, args []string
		want      int
		wantErr   string // "": valid
	}{
		{desc: "default", want: 8},
		{desc: "from the environment", env: []string{"LATCHKEY_RENEW_PARALLEL", "16"}, want: 16},
		{desc: "flag over the environment", env: []string{"LATCHKEY_RENEW_PARALLEL", "16"}, args: []string{"-renew-parallel", "1"}, want: 1},
		{desc: "zero", args: []string{"-renew-parallel", "0"}, wantErr: "-renew-parallel must be between 1 and 64, got 0"},
		{desc: "too many", args: []string{"-renew-parallel", "65"}, wantErr: "-renew-parallel must be between 1 and 64, got 65"},
		{desc: "not a number", env: []string{"LATCHKEY_RENEW_PARALLEL", "lots"}, wantErr: `LATCHKEY_RENEW_PARALLEL="lots" is not a whole number`},
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
			if c.RenewParallel != tt.want {
				t.Errorf("RenewParallel = %d, want %d", c.RenewParallel, tt.want)
			}
		})
	}
}

// TestRunRenewsKeepaliveLeases: run starts the keep-alive renewer, so a
// keep-alive lease is still owned after its first TTL has run out, its
// expiry moved on by renewals; and it stops the renewer on shutdown (run
// returns, checked by startServer's cleanup).
func TestRunRenewsKeepaliveLeases(t *testing.T) {
	s := startServer(t)
	// Renewed every ttl/3: a renewal may be late by more than a second on a
	// busy machine before the lease runs out.
	const ttl = 2 * time.Second
	granted := time.Now()
	resp, lease := s.call(t, http.MethodPost, "/v1/locks/watched", `{"ttl":"`+ttl.String()+`","keepalive":true}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire = %d %v, want 201", resp.StatusCode, lease)
	}
	token := resp.Header.Get("Lock-Token")
	first := expiresAt(t, lease)
	pollUntil(t, 30*time.Second, "the lease's expiry moved a TTL on", func() bool {
		_, state := s.call(t, http.MethodGet, "/v1/locks/watched", "", "Lock-Token", token)
		if state["owned"] != true {
			t.Fatalf("a %s keep-alive lease %s after it was granted: %v, want owned", ttl, time.Since(granted).Round(time.Millisecond), state)
		}
		return !expiresAt(t, state).Before(first.Add(ttl))
	})
	if resp, rel := s.call(t, http.MethodDelete, "/v1/locks/watched", "", "Lock-Token", token); resp.StatusCode != http.StatusOK {
		t.Errorf("release = %d %v, want 200", resp.StatusCode, rel)
	}
}

// expiresAt is the expires_at of a lease or lock state answer.
func expiresAt(t *testing.T, m map[string]any) time.Time {
	t.Helper()
	s, _ := m["expires_at"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("expires_at in %v: %v", m, err)
	}
	return at
}
