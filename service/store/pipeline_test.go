package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

func newPipelined(t *testing.T, rdb *redis.Client) *store.PipelinedClient {
	t.Helper()
	pc, err := store.NewPipelinedClient(rdb, 0)
	if err != nil {
		t.Fatalf("NewPipelinedClient: %v", err)
	}
	return pc
}

// TestPipelinedClientRunsScripts: concurrent calls through the shared
// pipeline each get their own answer, and NOSCRIPT comes back per command
// and is handled.
func TestPipelinedClientRunsScripts(t *testing.T) {
	_, rdb := newRedis(t)
	st := newStore(t, newPipelined(t, rdb), store.Config{})
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 50
	got := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := st.Run(t.Context(), incr, []string{fmt.Sprintf("k%d", i%5)})
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
			got[i], _ = res.(int64)
		})
	}
	wg.Wait()
	seen := map[[2]int64]bool{}
	for i, v := range got {
		k := [2]int64{int64(i % 5), v}
		if v < 1 || v > n/5 || seen[k] {
			t.Errorf("call %d on k%d answered %d: each key's calls must count 1..%d once each", i, i%5, v, n/5)
		}
		seen[k] = true
	}
	if _, ok := st.Client().(*store.PipelinedClient).Unpipelined().(*redis.Client); !ok {
		t.Error("Unpipelined is not the plain client")
	}
}

func TestPipelinedClientOnASilentStore(t *testing.T) {
	// The pipeline sends its batches on its own context, so only the read
	// timeout ends a batch Redis never answers (and lets Close return), as
	// the server's -redis-timeout does.
	rdb := redis.NewClient(&redis.Options{Addr: storetest.SilentRedis(t), MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	st := newStore(t, newPipelined(t, rdb), store.Config{OpTimeout: 50 * time.Millisecond})
	if _, err := st.Run(t.Context(), incr, []string{"n"}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Run past OpTimeout = %v, want ErrUnavailable", err)
	}
	if err := st.Ready(t.Context()); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ready = %v, want ErrUnavailable", err)
	}

	// A caller that goes away stops waiting at once: the store's bound is a
	// minute and Redis never answers, so nothing else ends the call.
	st = newStore(t, newPipelined(t, rdb), store.Config{OpTimeout: time.Minute})
	ctx, cancel := context.WithCancel(t.Context())
	go cancel() // before the call is queued or while it waits: the same to the caller
	_, err := st.Run(ctx, incr, []string{"n"})
	if !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Run cancelled by its caller = %v, want context.Canceled and not ErrUnavailable", err)
	}
}

// RunPipelined sends its calls in one pipeline and answers each call on its
// own: a call answered NOSCRIPT (the script cache was flushed) is run again
// once the script is loaded, and a call whose script fails gets its error
// while the others get their replies.
func TestRunPipelinedHealsNoScriptPerCall(t *testing.T) {
	_, rdb := newRedis(t)
	reg := prometheus.NewRegistry()
	st := newStore(t, rdb, store.Config{Registerer: reg})
	bad := store.NewScript("bad", "return redis.call('INCR', KEYS[1])")
	st.Register(bad)
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(t.Context(), "text", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if !st.CanPipeline() {
		t.Fatal("a single node's client cannot pipeline")
	}
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	calls := []store.Call{{Script: incr, Keys: []string{"a"}}, {Script: bad, Keys: []string{"text"}}, {Script: incr, Keys: []string{"a"}}}
	res, errs := st.RunPipelined(t.Context(), calls)
	if errs[0] != nil || errs[2] != nil || res[0] != int64(1) || res[2] != int64(2) {
		t.Errorf("incr calls = %v %v, %v %v; want 1 and 2, each run once after a reload", res[0], errs[0], res[2], errs[2])
	}
	if errs[1] == nil || errors.Is(errs[1], store.ErrUnavailable) {
		t.Errorf("INCR of a string = %v, %v; want the script's error", res[1], errs[1])
	}
	if got := storetest.CounterValue(t, reg, "latchkey_script_reloads_total"); got < 1 {
		t.Errorf("latchkey_script_reloads_total = %v, want the flushed scripts reloaded", got)
	}
}
