package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
)

// env returns a getenv that reads only the given pairs, never the real
// environment.
func env(pairs ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	return func(k string) string { return m[k] }
}

// essentials picks the settings these tests check, so a new setting does
// not break them.
func essentials(c Config) map[string]any {
	return map[string]any{
		"Addr": c.Addr, "RedisURL": c.RedisURL, "RedisTimeout": c.RedisTimeout,
		"ShutdownTimeout": c.ShutdownTimeout, "LogLevel": c.LogLevel, "AdminKey": c.AdminKey,
		"Dev": c.Dev, "KeyPrefix": c.KeyPrefix, "DefaultTTL": c.DefaultTTL, "MaxTTL": c.MaxTTL,
		"MaxBodyBytes": c.MaxBodyBytes, "ReadHeaderTimeout": c.ReadHeaderTimeout,
		"ReadTimeout": c.ReadTimeout, "WriteTimeout": c.WriteTimeout, "IdleTimeout": c.IdleTimeout,
	}
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := parseConfig(nil, env(), &bytes.Buffer{})
	if err != nil {
		t.Fatalf("parseConfig with no flags and no environment = %v", err)
	}
	want := map[string]any{
		"Addr": "127.0.0.1:8080", "RedisURL": "", "RedisTimeout": 2 * time.Second,
		"ShutdownTimeout": 15 * time.Second, "LogLevel": slog.LevelInfo, "AdminKey": "",
		"Dev": false, "KeyPrefix": "latchkey:", "DefaultTTL": 30 * time.Second, "MaxTTL": time.Hour,
		"MaxBodyBytes": int64(64 << 10), "ReadHeaderTimeout": 5 * time.Second,
		"ReadTimeout": 30 * time.Second, "WriteTimeout": 90 * time.Second, "IdleTimeout": 120 * time.Second,
	}
	if diff := cmp.Diff(want, essentials(c)); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

func TestParseConfigEnvironment(t *testing.T) {
	getenv := env(
		"LATCHKEY_ADDR", "0.0.0.0:9000",
		"LATCHKEY_REDIS_URL", "redis://redis:6379/0",
		"LATCHKEY_REDIS_TIMEOUT", "250ms",
		"LATCHKEY_SHUTDOWN_TIMEOUT", "3s",
		"LATCHKEY_LOG_LEVEL", "debug",
		"LATCHKEY_ADMIN_KEY", "0123456789abcdef",
		"LATCHKEY_DEV", "true",
		"LATCHKEY_KEY_PREFIX", "lk:",
		"LATCHKEY_DEFAULT_TTL", "10s",
		"LATCHKEY_MAX_TTL", "2h",
		"LATCHKEY_MAX_BODY_BYTES", "2048",
		"LATCHKEY_READ_HEADER_TIMEOUT", "1s",
		"LATCHKEY_READ_TIMEOUT", "2s",
		"LATCHKEY_WRITE_TIMEOUT", "3s",
		"LATCHKEY_IDLE_TIMEOUT", "4s",
		"LATCHKEY_MAX_WAIT", "2s",
	)
	c, err := parseConfig(nil, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("parseConfig = %v", err)
	}
	want := map[string]any{
		"Addr": "0.0.0.0:9000", "RedisURL": "redis://redis:6379/0", "RedisTimeout": 250 * time.Millisecond,
		"ShutdownTimeout": 3 * time.Second, "LogLevel": slog.LevelDebug, "AdminKey": "0123456789abcdef",
		"Dev": true, "KeyPrefix": "lk:", "DefaultTTL": 10 * time.Second, "MaxTTL": 2 * time.Hour,
		"MaxBodyBytes": int64(2048), "ReadHeaderTimeout": time.Second,
		"ReadTimeout": 2 * time.Second, "WriteTimeout": 3 * time.Second, "IdleTimeout": 4 * time.Second,
	}
	if diff := cmp.Diff(want, essentials(c)); diff != "" {
		t.Errorf("settings from the environment (-want +got):\n%s", diff)
	}
}

func TestParseConfigFlagsOverrideEnvironment(t *testing.T) {
	getenv := env("LATCHKEY_ADDR", "127.0.0.1:9000", "LATCHKEY_DEFAULT_TTL", "10s", "LATCHKEY_DEV", "true",
		"LATCHKEY_LOG_LEVEL", "debug", "LATCHKEY_MAX_BODY_BYTES", "2048")
	c, err := parseConfig([]string{"-addr", "127.0.0.1:9001", "-default-ttl=20s", "-dev=false", "-log-level", "warn",
		"-max-body-bytes", "4096"}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("parseConfig = %v", err)
	}
	if c.Addr != "127.0.0.1:9001" || c.DefaultTTL != 20*time.Second || c.Dev || c.LogLevel != slog.LevelWarn || c.MaxBodyBytes != 4096 {
		t.Errorf("flags did not win over the environment: %+v", c)
	}
}

func TestParseConfigBadEnvironmentNamesTheVariable(t *testing.T) {
	getenv := env("LATCHKEY_REDIS_TIMEOUT", "fast", "LATCHKEY_DEV", "maybe", "LATCHKEY_MAX_BODY_BYTES", "lots",
		"LATCHKEY_MAX_TTL", "1 hour")
	_, err := parseConfig(nil, getenv, &bytes.Buffer{})
	if err == nil {
		t.Fatal("parseConfig with bad environment values = nil, want an error")
	}
	for _, want := range []string{`LATCHKEY_REDIS_TIMEOUT="fast"`, `LATCHKEY_DEV="maybe"`, `LATCHKEY_MAX_BODY_BYTES="lots"`, `LATCHKEY_MAX_TTL="1 hour"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestParseConfigValidation(t *testing.T) {
	tests := []struct {
		desc string
		args []string
		env  []string
		want []string // substrings of the error; nil means valid
	}{
		{"embedded store on loopback", []string{"-addr", "127.0.0.1:8080"}, nil, nil},
		{"embedded store on localhost", []string{"-addr", "localhost:0"}, nil, nil},
		{"embedded store on IPv6 loopback", []string{"-addr", "[::1]:0"}, nil, nil},
		{"embedded store on all interfaces", []string{"-addr", "0.0.0.0:8080"}, nil,
			[]string{"-addr 0.0.0.0:8080 is not a loopback address", "-redis-url", "LATCHKEY_REDIS_URL", "-dev"}},
		{"embedded store on an empty host", []string{"-addr", ":8080"}, nil, []string{"is not a loopback address"}},
		{"embedded store on all interfaces with -dev", []string{"-addr", "0.0.0.0:8080", "-dev"}, nil, nil},
		{"embedded store on all interfaces with LATCHKEY_DEV", []string{"-addr", "0.0.0.0:8080"}, []string{"LATCHKEY_DEV", "1"}, nil},
		{"redis on all interfaces", []string{"-addr", "0.0.0.0:8080", "-redis-url", "redis://redis:6379"}, nil, nil},
		{"address without port", []string{"-addr", "localhost"}, nil, []string{`-addr "localhost": want host:port`}},
		{"default ttl above max ttl", []string{"-default-ttl", "2h"}, nil, []string{"-default-ttl 2h0m0s is above -max-ttl 1h0m0s"}},
		{"short admin key", []string{"-admin-key", "hunter2"}, nil, []string{"-admin-key must be at least 16 characters"}},
		{"zero redis timeout", []string{"-redis-timeout", "0s"}, nil, []string{"-redis-timeout must be positive"}},
		{"negative shutdown timeout", []string{"-shutdown-timeout", "-1s"}, nil, []string{"-shutdown-timeout must be positive"}},
		{"tiny body limit", []string{"-max-body-bytes", "10"}, nil, []string{"-max-body-bytes must be at least 1024, got 10"}},
		{"key prefix with a brace", []string{"-key-prefix", "lk{"}, nil, []string{`-key-prefix "lk{"`}},
		{"empty key prefix", []string{"-key-prefix", ""}, nil, []string{"-key-prefix"}},
		{"unknown log level", []string{"-log-level", "loud"}, nil, []string{`log level "loud"`}},
		{"several problems at once", []string{"-default-ttl", "2h", "-admin-key", "short"}, nil,
			[]string{"-default-ttl", "-admin-key"}},
		{"profiling on loopback", []string{"-pprof-addr", "127.0.0.1:6060"}, nil, nil},
		{"profiling on all interfaces", []string{"-pprof-addr", ":6060"}, nil, []string{`-pprof-addr ":6060" must be a loopback address`}},
		{"no pipeline queue", []string{"-redis-max-queued", "0"}, nil, []string{"-redis-max-queued must be at least 1"}},
		{"min replicas on redis", []string{"-redis-url", "redis://redis:6379", "-redis-min-replicas", "1"}, nil, nil},
		{"negative min replicas", []string{"-redis-url", "redis://redis:6379", "-redis-min-replicas", "-1"}, nil,
			[]string{"-redis-min-replicas must not be negative"}},
		{"replica wait as long as the redis timeout", []string{"-redis-url", "redis://redis:6379", "-redis-min-replicas", "1",
			"-redis-replica-timeout", "2s"}, nil, []string{"-redis-replica-timeout 2s must be positive and below -redis-timeout 2s"}},
		{"min replicas on the embedded store", []string{"-redis-min-replicas", "1"}, nil,
			[]string{"-redis-min-replicas needs -redis-url"}},
		{"stray argument", []string{"serve"}, nil, []string{"unexpected arguments: serve"}},
		{"unknown flag", []string{"-port", "80"}, nil, []string{"-port"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, err := parseConfig(tt.args, env(tt.env...), &bytes.Buffer{})
			if tt.want == nil {
				if err != nil {
					t.Fatalf("parseConfig(%q) = %v, want nil", tt.args, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("parseConfig(%q) = nil, want an error mentioning %q", tt.args, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestParseConfigHelpListsEnvironment(t *testing.T) {
	var out bytes.Buffer
	_, err := parseConfig([]string{"-h"}, env(), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseConfig(-h) = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"-redis-url", "LATCHKEY_REDIS_URL", "-admin-key", "LATCHKEY_ADMIN_KEY"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage does not mention %s:\n%s", want, out.String())
		}
	}
}

// TestParseConfigBadRedisURL: the error repeats the value, without its
// password, and lists the forms that work.
func TestParseConfigBadRedisURL(t *testing.T) {
	for _, tc := range []struct{ url, shown string }{
		{"foo", `"foo" has no scheme`},
		{"http://redis:6379", `"http://redis:6379": the scheme is http`},
		{"redis://:s3cret@redis:6379/zero", `"redis://:xxxxx@redis:6379/zero"`},
		{"redis://:s3cret@redis:port/0", "the value is not a URL"},
		{"redis://sentinel:26379/0?master_name=", "master_name must not be empty"},
	} {
		_, err := parseConfig([]string{"-redis-url", tc.url}, env(), io.Discard)
		if err == nil {
			t.Errorf("-redis-url %s: accepted", tc.url)
			continue
		}
		msg := err.Error()
		for _, want := range []string{"-redis-url", tc.shown, "redis://", "rediss://", "unix://", "master_name=NAME"} {
			if !strings.Contains(msg, want) {
				t.Errorf("-redis-url %s: error %q lacks %q", tc.url, msg, want)
			}
		}
		if strings.Contains(msg, "s3cret") {
			t.Errorf("-redis-url %s: error %q shows the password", tc.url, msg)
		}
	}
	for _, ok := range []string{"redis://127.0.0.1:6379/2", "rediss://u:p@redis:6380", "unix:///run/redis.sock?db=1",
		"redis://s1:26379/0?master_name=m&addr=s2:26379"} {
		if _, err := parseConfig([]string{"-redis-url", ok}, env(), io.Discard); err != nil {
			t.Errorf("-redis-url %s: %v", ok, err)
		}
	}
}

func TestDecisionBatchingFollowsThePipelineFlags(t *testing.T) {
	for _, tc := range []struct {
		pipeline  bool
		wantBatch int
	}{{true, 0}, {false, 1}} {
		rl := Config{RedisPipeline: tc.pipeline, RedisMaxQueued: 42}.decisionBatching(ratelimit.Config{})
		if rl.Batch != tc.wantBatch || rl.MaxQueued != 42 {
			t.Errorf("pipeline %v: batch %d, max queued %d; want %d (0: the service default) and 42",
				tc.pipeline, rl.Batch, rl.MaxQueued, tc.wantBatch)
		}
	}
}

// The server's defaults are the libraries' own: one source for each.
func TestFlagDefaultsAreTheLibraryDefaults(t *testing.T) {
	c, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sd, ld, rd := store.DefaultConfig(), locks.DefaultConfig(), ratelimit.DefaultConfig()
	got := []any{c.RedisTimeout, c.ReplicaTimeout, c.KeyPrefix, c.DefaultTTL, c.MaxTTL, c.MaxWait,
		c.MaxHold, c.MaxHoldCap, c.RenewParallel, c.RateLimit.Timeout, c.RateLimit.CacheSize, c.RateLimit.LogInterval}
	want := []any{sd.OpTimeout, sd.ReplicaTimeout, sd.KeyPrefix, ld.DefaultTTL, ld.MaxTTL, ld.MaxWait,
		ld.DefaultMaxHold, ld.MaxHoldCap, ld.RenewParallel, rd.Timeout, rd.CacheSize, rd.LogInterval}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("default %d = %v, want the library's %v", i, got[i], want[i])
		}
	}
	if ld.MaxTTL != time.Hour {
		t.Errorf("locks.DefaultConfig().MaxTTL = %s, want 1h", ld.MaxTTL)
	}
}
