package locks_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

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
