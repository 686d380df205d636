package service_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service"
	"github.com/redis/go-redis/v9"
)

// t0 is the Redis clock of most tests: a whole millisecond, so expiry times
// computed from TIME compare exactly.
var t0 = time.Date(2026, 11, 23, 4, 0, 0, 0, time.UTC)

// newTestRedis starts a miniredis with its clock at t0 and returns it with a
// client that neither retries nor waits long.
func newTestRedis(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(t0)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return m, rdb
}

// mustNew builds a Service on rdb and loads its scripts.
func mustNew(t *testing.T, rdb service.RedisClient, cfg service.Config) *service.Service {
	t.Helper()
	svc, err := service.New(rdb, cfg)
	if err != nil {
		t.Fatalf("service.New: %v", err)
	}
	if err := svc.LoadScripts(t.Context()); err != nil {
		t.Fatalf("LoadScripts: %v", err)
	}
	return svc
}

// newTestService returns a Service on a fresh miniredis (clock at t0).
func newTestService(t *testing.T, cfg service.Config) (*service.Service, *miniredis.Miniredis) {
	t.Helper()
	m, rdb := newTestRedis(t)
	return mustNew(t, rdb, cfg), m
}

func TestNewRejectsNilClient(t *testing.T) {
	if _, err := service.New(nil, service.Config{}); err == nil {
		t.Fatal("New(nil) error = nil, want an error")
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	_, rdb := newTestRedis(t)
	_, err := service.New(rdb, service.Config{MinTTL: time.Minute, MaxTTL: time.Second})
	if err == nil || !strings.HasPrefix(err.Error(), "service: ") {
		t.Fatalf("New error = %v, want a \"service: \" error about the ttl bounds", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	svc, _ := newTestService(t, service.Config{})
	got := svc.Config()
	want := service.Config{
		KeyPrefix:  service.DefaultKeyPrefix,
		OpTimeout:  2 * time.Second,
		DefaultTTL: 30 * time.Second,
		MinTTL:     time.Millisecond,
		MaxTTL:     24 * time.Hour,
		FenceTTL:   24 * time.Hour,
		MaxWait:    60 * time.Second,

		SubscriberPing: 10 * time.Second,
		ReplicaTimeout: 100 * time.Millisecond,

		DefaultMaxHold: time.Hour,
		MaxHoldCap:     24 * time.Hour,
		LostTTL:        time.Hour,
		RenewBatch:     100,
		RenewParallel:  8,
		RenewPoll:      100 * time.Millisecond,

		MinKeepaliveTTL: time.Second,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Config() mismatch (-want +got):\n%s", diff)
	}
}

func TestReady(t *testing.T) {
	svc, m := newTestService(t, service.Config{})
	if err := svc.Ready(t.Context()); err != nil {
		t.Fatalf("Ready = %v, want nil", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("Ready wrote keys %q, want none", keys)
	}
	m.Close()
	if err := svc.Ready(t.Context()); !errors.Is(err, service.ErrUnavailable) {
		t.Fatalf("Ready on a closed store = %v, want ErrUnavailable", err)
	}
}

// A client that cannot run a script and WAIT on one connection cannot serve
// MinReplicas: New says so instead of failing at the first grant.
func TestNewRefusesMinReplicasWithoutAConnection(t *testing.T) {
	_, err := service.New(scripterOnly{}, service.Config{MinReplicas: 1})
	if err == nil || !strings.Contains(err.Error(), "min replicas needs a client that can run a script and WAIT on one connection") {
		t.Fatalf("New with MinReplicas on a client without Conn = %v, want an error saying so", err)
	}
}

// scripterOnly is a RedisClient with no Conn method; it is never called.
type scripterOnly struct{ service.RedisClient }
