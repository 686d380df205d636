package ratelimit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// t0 is the Redis clock of most tests: a whole millisecond, so times
// computed from TIME compare exactly.
var t0 = time.Date(2026, 11, 23, 4, 0, 0, 0, time.UTC)

// config configures a test Service: its rate limits and the registry of
// its metrics and its store's.
type config struct {
	Registerer prometheus.Registerer
	OpTimeout  time.Duration // the store's; zero: its default
	RateLimit  ratelimit.Config
}

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

// newStore builds a Service on a store of its own on rdb.
func newStore(rdb store.Client, cfg config) (*store.Store, *ratelimit.Service, error) {
	st, err := store.New(rdb, store.Config{Registerer: cfg.Registerer, OpTimeout: cfg.OpTimeout})
	if err != nil {
		return nil, nil, err
	}
	cfg.RateLimit.Registerer = cfg.Registerer
	svc, err := ratelimit.New(st, cfg.RateLimit)
	return st, svc, err
}

// newService builds a Service on rdb without loading its scripts.
func newService(rdb store.Client, cfg config) (*ratelimit.Service, error) {
	_, svc, err := newStore(rdb, cfg)
	return svc, err
}

// mustNew builds a Service on rdb and loads its scripts.
func mustNew(t *testing.T, rdb store.Client, cfg config) *ratelimit.Service {
	t.Helper()
	st, svc, err := newStore(rdb, cfg)
	if err != nil {
		t.Fatalf("ratelimit.New: %v", err)
	}
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatalf("LoadScripts: %v", err)
	}
	return svc
}

// newTestService returns a Service on a fresh miniredis (clock at t0).
func newTestService(t *testing.T, cfg config) (*ratelimit.Service, *miniredis.Miniredis) {
	t.Helper()
	m, rdb := newTestRedis(t)
	return mustNew(t, rdb, cfg), m
}

// wantNoGoType fails the test if err prints a Go type: a policy file's
// errors speak of its fields, not of the code that reads them.
func wantNoGoType(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, marker := range []string{"struct {", "map[", "[]", "ratelimit.", "int64", "!!", "unmarshal", "Go "} {
		if strings.Contains(err.Error(), marker) {
			t.Errorf("error %q prints a Go type (%q)", err, marker)
		}
	}
}

// forEachPolicyFile parses a policy file in its YAML and its JSON form,
// checks each in full (Config.Validate) and hands the policies to check,
// in a subtest per form.
func forEachPolicyFile(t *testing.T, yaml, json string, check func(t *testing.T, ps []ratelimit.Policy)) {
	t.Helper()
	for _, tt := range []struct {
		name   string
		src    string
		isJSON bool
	}{{"yaml", yaml, false}, {"json", json, true}} {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := ratelimit.ParsePolicies([]byte(tt.src), tt.isJSON)
			if err != nil {
				t.Fatal(err)
			}
			if err := (ratelimit.Config{Policies: ps}).Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			check(t, ps)
		})
	}
}
