package locks_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// flakyClient wraps a RedisClient and lets a test decide what EVALSHA
// answers, like redislock's flakyScripter.
type flakyClient struct {
	store.Client
	// evalSha, when set, runs instead of the command; a nil error passes
	// the call through to Redis.
	evalSha func(ctx context.Context) error
}

func (f *flakyClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if f.evalSha != nil {
		if err := f.evalSha(ctx); err != nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd
		}
	}
	return f.Client.EvalSha(ctx, sha, keys, args...)
}

// serverError is an error reply from Redis, as go-redis classifies them.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// ops runs each service operation once on a lock held by tokenA, so a test
// can check every script's path through run.
func ops(svc *locks.Service) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"acquire": func(ctx context.Context) error {
			_, err := svc.Acquire(ctx, "orders", locks.AcquireRequest{Token: tokenA})
			return err
		},
		"renew": func(ctx context.Context) error { _, err := svc.Renew(ctx, "orders", tokenA, 0); return err },
		"inspect": func(ctx context.Context) error {
			_, err := svc.Inspect(ctx, "orders", tokenA)
			return err
		},
		"release": func(ctx context.Context) error { _, err := svc.Release(ctx, "orders", tokenA); return err },
		"force_release": func(ctx context.Context) error {
			_, err := svc.ForceRelease(ctx, "orders")
			return err
		},
	}
}

func TestNoScriptReloadsAndRetries(t *testing.T) {
	_, rdb := newTestRedis(t)
	reg := prometheus.NewRegistry()
	svc := mustNew(t, rdb, locks.Config{Registerer: reg})
	want := 0.0
	// In this order every call succeeds on the lock tokenA holds.
	for _, op := range []string{"acquire", "renew", "inspect", "release", "acquire", "force_release"} {
		if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
		if err := ops(svc)[op](t.Context()); err != nil {
			t.Fatalf("%s after SCRIPT FLUSH = %v, want success after a reload", op, err)
		}
		want++
		if got := storetest.CounterValue(t, reg, "latchkey_script_reloads_total"); got != want {
			t.Errorf("%s: latchkey_script_reloads_total = %v, want %v", op, got, want)
		}
	}
}

func TestClosedStoreIsUnavailable(t *testing.T) {
	m, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, locks.Config{}, store.Config{OpTimeout: time.Second})
	m.Close()
	if err := locks.LoadScripts(t.Context(), svc); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("LoadScripts = %v, want ErrUnavailable", err)
	}
	for name, op := range ops(svc) {
		if err := op(t.Context()); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s on a closed store = %v, want ErrUnavailable", name, err)
		}
	}
}

func TestSilentStoreIsUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: storetest.SilentRedis(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	svc, err := newService(rdb, locks.Config{}, store.Config{OpTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Ready(t.Context()); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ready = %v, want ErrUnavailable", err)
	}
	for name, op := range ops(svc) {
		if err := op(t.Context()); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s on a silent store = %v, want ErrUnavailable", name, err)
		}
	}
}
