package locks_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
		if got := counterValue(t, reg, "latchkey_script_reloads_total"); got != want {
			t.Errorf("%s: latchkey_script_reloads_total = %v, want %v", op, got, want)
		}
	}
}

func TestLoadScriptsNamesABrokenScript(t *testing.T) {
	_, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, locks.Config{})
	locks.AddScript(svc, "broken_on_purpose", "return (")
	err := locks.LoadScripts(t.Context(), svc)
	if err == nil {
		t.Fatal("LoadScripts with a broken script = nil, want an error")
	}
	if !strings.Contains(err.Error(), "broken_on_purpose") {
		t.Errorf("LoadScripts error %q does not name the broken script", err)
	}
	if errors.Is(err, store.ErrUnavailable) {
		t.Errorf("LoadScripts error %q wraps ErrUnavailable; a broken script is not an outage", err)
	}
	if err := svc.Ready(t.Context()); err == nil {
		t.Error("Ready with a broken script = nil, want an error")
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

// silentRedis returns the address of a listener that accepts connections and
// never answers, like a Redis behind a dead network path.
func silentRedis(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

func TestSilentStoreIsUnavailable(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: silentRedis(t), MaxRetries: -1, ContextTimeoutEnabled: true})
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

func TestStoreFaults(t *testing.T) {
	tests := []struct {
		desc        string
		err         error
		unavailable bool
	}{
		{"deadline exceeded", context.DeadlineExceeded, true},
		{"i/o timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"connection closed", io.EOF, true},
		{"pool timeout", redis.ErrPoolTimeout, true},
		{"client closed", redis.ErrClosed, true},
		{"loading", serverError("LOADING Redis is loading the dataset in memory"), true},
		{"busy", serverError("BUSY Redis is busy running a script"), true},
		{"master down", serverError("MASTERDOWN Link with MASTER is down"), true},
		{"read-only replica", serverError("READONLY You can't write against a read only replica."), true},
		{"cluster down", serverError("CLUSTERDOWN The cluster is down"), true},
		{"try again", serverError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{"no replicas", serverError("NOREPLICAS Not enough good replicas to write."), true},
		{"script bug", serverError("ERR user_script:1: attempt to compare nil with number"), false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, rdb := newTestRedis(t)
			reg := prometheus.NewRegistry()
			flaky := &flakyClient{Client: rdb, evalSha: func(context.Context) error { return tt.err }}
			svc := mustNew(t, flaky, locks.Config{Registerer: reg})
			for name, op := range ops(svc) {
				err := op(t.Context())
				if err == nil {
					t.Fatalf("%s = nil, want an error", name)
				}
				if got := errors.Is(err, store.ErrUnavailable); got != tt.unavailable {
					t.Errorf("%s: errors.Is(%v, ErrUnavailable) = %v, want %v", name, err, got, tt.unavailable)
				}
				if !errors.Is(err, tt.err) {
					t.Errorf("%s: error %v lost the cause %v", name, err, tt.err)
				}
			}
			kind := "script"
			if tt.unavailable {
				kind = "unavailable"
			}
			if got := counterValue(t, reg, "latchkey_redis_errors_total", "op", "acquire", "kind", kind); got != 1 {
				t.Errorf("latchkey_redis_errors_total{op=acquire,kind=%s} = %v, want 1", kind, got)
			}
		})
	}
}

// TestServerErrorsOverTheWire checks the same classification with error
// replies that really cross the wire.
func TestServerErrorsOverTheWire(t *testing.T) {
	tests := []struct {
		reply       string
		unavailable bool
	}{
		{"LOADING Redis is loading the dataset in memory", true},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", true},
		{"ERR something is wrong with the script", false},
	}
	for _, tt := range tests {
		t.Run(tt.reply, func(t *testing.T) {
			m, rdb := newTestRedis(t)
			svc := mustNew(t, rdb, locks.Config{})
			m.SetError(tt.reply)
			_, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{})
			if err == nil {
				t.Fatal("Acquire = nil, want an error")
			}
			if got := errors.Is(err, store.ErrUnavailable); got != tt.unavailable {
				t.Errorf("errors.Is(%v, ErrUnavailable) = %v, want %v", err, got, tt.unavailable)
			}
		})
	}
}

// blockUntilDone is an EVALSHA that never answers: it returns when its
// context ends, as go-redis does.
func blockUntilDone(entered chan<- struct{}) func(context.Context) error {
	var once sync.Once
	return func(ctx context.Context) error {
		once.Do(func() { close(entered) })
		<-ctx.Done()
		return ctx.Err()
	}
}

func TestOpTimeoutIsUnavailable(t *testing.T) {
	_, rdb := newTestRedis(t)
	flaky := &flakyClient{Client: rdb, evalSha: blockUntilDone(make(chan struct{}))}
	// No LoadScripts: it would have to finish within the 20ms too, and the
	// blocked EVALSHA never reaches Redis anyway.
	svc, err := newService(flaky, locks.Config{}, store.Config{OpTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Acquire(t.Context(), "orders", locks.AcquireRequest{})
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past OpTimeout = %v, want ErrUnavailable wrapping context.DeadlineExceeded", err)
	}
}

func TestCallerDeadlineIsUnavailable(t *testing.T) {
	_, rdb := newTestRedis(t)
	flaky := &flakyClient{Client: rdb, evalSha: blockUntilDone(make(chan struct{}))}
	svc := mustNew(t, flaky, locks.Config{}, store.Config{OpTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := svc.Acquire(ctx, "orders", locks.AcquireRequest{}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Acquire past the caller's deadline = %v, want ErrUnavailable", err)
	}
}

func TestCallerCancelIsContextCanceled(t *testing.T) {
	_, rdb := newTestRedis(t)
	entered := make(chan struct{})
	flaky := &flakyClient{Client: rdb, evalSha: blockUntilDone(entered)}
	svc := mustNew(t, flaky, locks.Config{}, store.Config{OpTimeout: time.Minute})
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-entered; cancel() }()
	_, err := svc.Acquire(ctx, "orders", locks.AcquireRequest{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire cancelled by its caller = %v, want context.Canceled", err)
	}
	if errors.Is(err, store.ErrUnavailable) {
		t.Errorf("a caller that went away got ErrUnavailable (%v); the store did nothing wrong", err)
	}
}
