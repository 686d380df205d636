package locks_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// t0 is the Redis clock of most tests: a whole millisecond, so expiry times
// computed from TIME compare exactly.
var t0 = time.Date(2026, 11, 23, 4, 0, 0, 0, time.UTC)

// newTestRedis starts a miniredis with its clock at t0 and returns it with a
// client that neither retries nor waits long. It takes SPUBLISH as PUBLISH,
// which miniredis lacks, so the scripts' Redis Cluster forms (lua.Sharded)
// run on it too.
func newTestRedis(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(t0)
	if err := m.Server().Register("SPUBLISH", func(c *server.Peer, _ string, args []string) {
		m.Server().Dispatch(c, append([]string{"PUBLISH"}, args...))
	}); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return m, rdb
}

// subscribeAll subscribes to every channel of rdb and waits for the
// subscription's confirmation, so no message published after it is missed.
func subscribeAll(t *testing.T, rdb *redis.Client) *redis.PubSub {
	t.Helper()
	sub := rdb.PSubscribe(t.Context(), "*")
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(t.Context()); err != nil {
		t.Fatal(err)
	}
	return sub
}

// newService builds a Service on a store on rdb configured by the first of
// scfg (defaults when none), without loading its scripts. The store's
// metrics go to cfg.Registerer unless scfg names another.
func newService(rdb store.Client, cfg locks.Config, scfg ...store.Config) (*locks.Service, error) {
	var sc store.Config
	if len(scfg) > 0 {
		sc = scfg[0]
	}
	if sc.Registerer == nil {
		sc.Registerer = cfg.Registerer
	}
	st, err := store.New(rdb, sc)
	if err != nil {
		return nil, err
	}
	return locks.New(st, cfg)
}

// mustNew builds a Service on rdb (see newService) and loads its scripts.
func mustNew(t *testing.T, rdb store.Client, cfg locks.Config, scfg ...store.Config) *locks.Service {
	t.Helper()
	svc, err := newService(rdb, cfg, scfg...)
	if err != nil {
		t.Fatalf("locks.New: %v", err)
	}
	if err := locks.LoadScripts(t.Context(), svc); err != nil {
		t.Fatalf("LoadScripts: %v", err)
	}
	return svc
}

// newTestService returns a Service on a fresh miniredis (clock at t0).
func newTestService(t *testing.T, cfg locks.Config, scfg ...store.Config) (*locks.Service, *miniredis.Miniredis) {
	t.Helper()
	m, rdb := newTestRedis(t)
	return mustNew(t, rdb, cfg, scfg...), m
}

func TestNewRejectsNilStore(t *testing.T) {
	if _, err := locks.New(nil, locks.Config{}); err == nil {
		t.Fatal("New(nil) error = nil, want an error")
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	_, rdb := newTestRedis(t)
	_, err := newService(rdb, locks.Config{MinTTL: time.Minute, MaxTTL: time.Second})
	if err == nil || !strings.HasPrefix(err.Error(), "locks: ") {
		t.Fatalf("New error = %v, want a \"locks: \" error about the ttl bounds", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	svc, _ := newTestService(t, locks.Config{})
	got := svc.Config()
	want := locks.Config{
		DefaultTTL: 30 * time.Second,
		MinTTL:     time.Millisecond,
		MaxTTL:     time.Hour,
		FenceTTL:   time.Hour,
		MaxWait:    60 * time.Second,

		SubscriberPing: 10 * time.Second,
		WatchResync:    10 * time.Second,

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
	svc, m := newTestService(t, locks.Config{})
	if err := svc.Ready(t.Context()); err != nil {
		t.Fatalf("Ready = %v, want nil", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("Ready wrote keys %q, want none", keys)
	}
	m.Close()
	if err := svc.Ready(t.Context()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Ready on a closed store = %v, want ErrUnavailable", err)
	}
}
