package store_test

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

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// incr counts its calls in KEYS[1] and answers the count: a state change
// (status 1 or more) for RunReplicated.
var incr = store.NewScript("incr", "return redis.call('INCR', KEYS[1])")

// noop answers 0: it changed nothing.
var noop = store.NewScript("noop", "return 0")

func newRedis(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return m, rdb
}

func newStore(t *testing.T, rdb store.Client, cfg store.Config) *store.Store {
	t.Helper()
	st, err := store.New(rdb, cfg)
	if err != nil {
		t.Fatalf("store.New: %v", err)
	}
	st.Register(incr, noop)
	return st
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  store.Config
		want string // substring of the error; "" means valid
	}{
		{"zero value", store.Config{}, ""},
		{"min replicas with defaults", store.Config{MinReplicas: 1}, ""},
		{"negative min replicas", store.Config{MinReplicas: -1}, "min replicas -1 must not be negative"},
		{"replica timeout at the redis timeout", store.Config{MinReplicas: 1, OpTimeout: time.Second, ReplicaTimeout: time.Second},
			"replica timeout 1s must be below the redis timeout 1s"},
		{"replica timeout unused without min replicas", store.Config{OpTimeout: time.Second, ReplicaTimeout: time.Minute}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tt.want)
			}
			if _, nerr := store.New(redis.NewClient(&redis.Options{}), tt.cfg); (nerr == nil) != (err == nil) {
				t.Errorf("New = %v, Validate = %v: New must refuse what Validate refuses", nerr, err)
			}
		})
	}
	if got := store.DefaultConfig(); got.KeyPrefix != store.DefaultKeyPrefix || got.OpTimeout != 2*time.Second || got.ReplicaTimeout != 100*time.Millisecond {
		t.Errorf("DefaultConfig() = %+v", got)
	}
}

// scripterOnly is a Client with no Conn method; it is never called.
type scripterOnly struct{ store.Client }

// A client that cannot run a script and WAIT on one connection cannot serve
// MinReplicas: New says so instead of failing at the first change.
func TestNewRefusesMinReplicasWithoutAConnection(t *testing.T) {
	_, err := store.New(scripterOnly{}, store.Config{MinReplicas: 1})
	if err == nil || !strings.Contains(err.Error(), "min replicas needs a client that can run a script and WAIT on one connection") {
		t.Fatalf("New with MinReplicas on a client without Conn = %v, want an error saying so", err)
	}
	if _, err := store.New(nil, store.Config{}); err == nil {
		t.Error("New with a nil client = nil error")
	}
}

func TestNoScriptReloadsAndRetries(t *testing.T) {
	_, rdb := newRedis(t)
	reg := prometheus.NewRegistry()
	st := newStore(t, rdb, store.Config{Registerer: reg})
	for i := range 3 {
		if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		res, err := st.Run(t.Context(), incr, []string{"n"})
		if err != nil || res != int64(i+1) {
			t.Fatalf("Run after SCRIPT FLUSH = %v, %v; want %d after a reload", res, err, i+1)
		}
		if got := storetest.CounterValue(t, reg, "latchkey_script_reloads_total"); got != float64(i+1) {
			t.Errorf("latchkey_script_reloads_total = %v, want %d", got, i+1)
		}
	}
}

func TestLoadScriptsNamesABrokenScript(t *testing.T) {
	_, rdb := newRedis(t)
	st := newStore(t, rdb, store.Config{})
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatalf("LoadScripts = %v", err)
	}
	st.Register(store.NewScript("broken_on_purpose", "return ("))
	err := st.LoadScripts(t.Context())
	if err == nil || !strings.Contains(err.Error(), "broken_on_purpose") {
		t.Fatalf("LoadScripts with a broken script = %v, want an error naming it", err)
	}
	if errors.Is(err, store.ErrUnavailable) {
		t.Errorf("LoadScripts error %q wraps ErrUnavailable; a broken script is not an outage", err)
	}
	if err := st.Ready(t.Context()); err == nil {
		t.Error("Ready with a broken script = nil, want an error")
	}
}

// flakyClient lets a test decide what EVALSHA answers, like redislock's
// flakyScripter; a nil error passes the call through.
type flakyClient struct {
	store.Client
	evalSha func(ctx context.Context) error
}

func (f *flakyClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if err := f.evalSha(ctx); err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return f.Client.EvalSha(ctx, sha, keys, args...)
}

// serverError is an error reply from Redis, as go-redis classifies them.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// TestErrorTranslation: timeouts, lost connections and transient server
// states are ErrUnavailable (kind "unavailable"), anything else a script
// error (kind "script"); each keeps its cause and counts once.
func TestErrorTranslation(t *testing.T) {
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
		{"moved", serverError("MOVED 3999 127.0.0.1:6381"), true},
		{"ask", serverError("ASK 3999 127.0.0.1:6381"), true},
		{"script bug", serverError("ERR user_script:1: attempt to compare nil with number"), false},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, rdb := newRedis(t)
			reg := prometheus.NewRegistry()
			flaky := &flakyClient{Client: rdb, evalSha: func(context.Context) error { return tt.err }}
			st := newStore(t, flaky, store.Config{Registerer: reg})
			for _, run := range []func() (any, error){
				func() (any, error) { return st.Run(t.Context(), incr, []string{"n"}) },
				func() (any, error) { return st.RunReplicated(t.Context(), incr, []string{"n"}) },
			} {
				_, err := run()
				if got := errors.Is(err, store.ErrUnavailable); got != tt.unavailable {
					t.Errorf("errors.Is(%v, ErrUnavailable) = %v, want %v", err, got, tt.unavailable)
				}
				if !errors.Is(err, tt.err) {
					t.Errorf("error %v lost the cause %v", err, tt.err)
				}
			}
			kind := "script"
			if tt.unavailable {
				kind = "unavailable"
			}
			if got := storetest.CounterValue(t, reg, "latchkey_redis_errors_total", "kind", kind, "op", "incr"); got != 2 {
				t.Errorf("latchkey_redis_errors_total{op=incr,kind=%s} = %v, want 2 (one per call)", kind, got)
			}
		})
	}
}

// TestServerErrorsOverTheWire checks the same with error replies that
// really cross the wire.
func TestServerErrorsOverTheWire(t *testing.T) {
	for reply, unavailable := range map[string]bool{
		"LOADING Redis is loading the dataset in memory":                                   true,
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.": true,
		"ERR something is wrong with the script":                                           false,
	} {
		t.Run(reply, func(t *testing.T) {
			m, rdb := newRedis(t)
			st := newStore(t, rdb, store.Config{})
			m.SetError(reply)
			_, err := st.Run(t.Context(), incr, []string{"n"})
			if err == nil || errors.Is(err, store.ErrUnavailable) != unavailable {
				t.Errorf("Run = %v, want an error with errors.Is(ErrUnavailable) %v", err, unavailable)
			}
		})
	}
}

// blockUntilDone is an EVALSHA that never answers: it returns when its
// context ends, as go-redis does, and closes entered when first called.
func blockUntilDone(entered chan<- struct{}) func(context.Context) error {
	var once sync.Once
	return func(ctx context.Context) error {
		once.Do(func() { close(entered) })
		<-ctx.Done()
		return ctx.Err()
	}
}

func TestTimeouts(t *testing.T) {
	_, rdb := newRedis(t)
	flaky := &flakyClient{Client: rdb, evalSha: blockUntilDone(make(chan struct{}))}

	// The store's bound on a call: the EVALSHA never answers, so only the
	// bound can end it, whenever that is.
	st := newStore(t, flaky, store.Config{OpTimeout: 20 * time.Millisecond})
	_, err := st.Run(t.Context(), incr, []string{"n"})
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run past OpTimeout = %v, want ErrUnavailable wrapping context.DeadlineExceeded", err)
	}

	// The caller's deadline, before the store's.
	st = newStore(t, flaky, store.Config{OpTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := st.Run(ctx, incr, []string{"n"}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Run past the caller's deadline = %v, want ErrUnavailable", err)
	}
}

func TestCallerCancelIsContextCanceled(t *testing.T) {
	_, rdb := newRedis(t)
	entered := make(chan struct{})
	flaky := &flakyClient{Client: rdb, evalSha: blockUntilDone(entered)}
	reg := prometheus.NewRegistry()
	st := newStore(t, flaky, store.Config{OpTimeout: time.Minute, Registerer: reg})
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-entered; cancel() }()
	_, err := st.Run(ctx, incr, []string{"n"})
	if !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Run cancelled by its caller = %v, want context.Canceled and not ErrUnavailable", err)
	}
	for _, kind := range []string{"unavailable", "script"} {
		if got := storetest.CounterValue(t, reg, "latchkey_redis_errors_total", "kind", kind, "op", "incr"); got != 0 {
			t.Errorf("a caller that went away counted as a %s error", kind)
		}
	}
}

// TestRunReplicated: with MinReplicas, a change waits for the replicas
// (miniredis has none: WAIT answers 0) and is a *ReplicationError wrapping
// ErrUnavailable when too few have it; an answer that changed nothing does
// not wait; without MinReplicas nothing waits.
func TestRunReplicated(t *testing.T) {
	_, rdb := newRedis(t)
	reg := prometheus.NewRegistry()
	st := newStore(t, rdb, store.Config{MinReplicas: 1, Registerer: reg})
	_, err := st.RunReplicated(t.Context(), incr, []string{"n"})
	var rerr *store.ReplicationError
	if !errors.As(err, &rerr) || rerr.Acked != 0 || rerr.Want != 1 || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("RunReplicated of a change with no replica = %v, want a *ReplicationError{0, 1} wrapping ErrUnavailable", err)
	}
	if got := storetest.CounterValue(t, reg, "latchkey_redis_errors_total", "kind", "replicas", "op", "incr"); got != 1 {
		t.Errorf("latchkey_redis_errors_total{op=incr,kind=replicas} = %v, want 1", got)
	}
	if n, err := rdb.Get(t.Context(), "n").Int(); err != nil || n != 1 {
		t.Errorf("n = %d, %v; want 1: the change is made, only not confirmed", n, err)
	}
	if res, err := st.RunReplicated(t.Context(), noop, nil); err != nil || res != int64(0) {
		t.Errorf("RunReplicated of an answer that changed nothing = %v, %v; want 0 without waiting", res, err)
	}
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := st.RunReplicated(t.Context(), noop, nil); err != nil || res != int64(0) {
		t.Errorf("RunReplicated after SCRIPT FLUSH = %v, %v; want a reload", res, err)
	}

	plain := newStore(t, rdb, store.Config{})
	if res, err := plain.RunReplicated(t.Context(), incr, []string{"n"}); err != nil || res != int64(2) {
		t.Errorf("RunReplicated without MinReplicas = %v, %v; want 2 and no wait", res, err)
	}
}

func TestReady(t *testing.T) {
	m, rdb := newRedis(t)
	st := newStore(t, rdb, store.Config{OpTimeout: time.Second})
	if err := st.Ready(t.Context()); err != nil {
		t.Fatalf("Ready = %v", err)
	}
	m.Close()
	if err := st.Ready(t.Context()); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ready on a closed store = %v, want ErrUnavailable", err)
	}
	if err := st.LoadScripts(t.Context()); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("LoadScripts on a closed store = %v, want ErrUnavailable", err)
	}
}
