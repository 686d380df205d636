package locks_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
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

func TestPipelinedClientRunsEveryScript(t *testing.T) {
	_, rdb := newTestRedis(t)
	svc := mustNew(t, newPipelined(t, rdb), locks.Config{})
	for _, op := range []string{"acquire", "acquire", "renew", "inspect", "release", "release", "acquire", "force_release"} {
		if err := ops(svc)[op](t.Context()); err != nil {
			t.Fatalf("%s through the pipeline = %v", op, err)
		}
	}
	// NOSCRIPT comes back per command through the pipeline, and is handled.
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := ops(svc)["acquire"](t.Context()); err != nil {
		t.Fatalf("acquire after SCRIPT FLUSH through the pipeline = %v", err)
	}
}

// TestPipelinedClientOneWinner races acquires of one lock through the shared
// pipeline: exactly one is granted, every other gets a *HeldError.
func TestPipelinedClientOneWinner(t *testing.T) {
	_, rdb := newTestRedis(t)
	svc := mustNew(t, newPipelined(t, rdb), locks.Config{})
	const n = 50
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = svc.Acquire(t.Context(), "orders", locks.AcquireRequest{Token: fmt.Sprintf("racer-%02d-0123456789abcdef", i)})
		}()
	}
	wg.Wait()
	granted := 0
	for i, err := range errs {
		var held *locks.HeldError
		switch {
		case err == nil:
			granted++
		case !errors.As(err, &held):
			t.Errorf("racer %d: %v, want a grant or *HeldError", i, err)
		}
	}
	if granted != 1 {
		t.Errorf("%d racers got the lock, want exactly 1", granted)
	}
}

func TestPipelinedClientOnASilentStore(t *testing.T) {
	// The pipeline sends its batches on its own context, so only the read
	// timeout ends a batch Redis never answers (and lets Close return), as
	// the server's -redis-timeout does.
	rdb := redis.NewClient(&redis.Options{Addr: silentRedis(t), MaxRetries: -1, ContextTimeoutEnabled: true,
		ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	svc, err := newService(newPipelined(t, rdb), locks.Config{}, store.Config{OpTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Acquire past OpTimeout = %v, want ErrUnavailable", err)
	}

	svc, err = newService(newPipelined(t, rdb), locks.Config{}, store.Config{OpTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err = svc.Acquire(ctx, "orders", locks.AcquireRequest{})
	if !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Acquire cancelled by its caller = %v, want context.Canceled and not ErrUnavailable", err)
	}
}
