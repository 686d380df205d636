package locks_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

var renewBatchSHA = storetest.ScriptSHA(lua.Source("renew_batch"))

// renewCall is one renew_batch call as a renewRecorder saw it: the registry
// members it named and, per member, the code renew_batch answered (1 =
// renewed, 0 = skipped as no longer due; see renew_batch.lua).
type renewCall struct {
	members []string
	codes   []int64
	err     error
}

// renewRecorder passes every call through to a RedisClient and records the
// renew_batch calls. When gate is set, each renew_batch call first reports
// itself on entered and waits for gate to close (or its context to end).
type renewRecorder struct {
	store.Client
	entered chan struct{}
	gate    chan struct{}
	// fail, when set, makes a renew_batch call naming a member it accepts
	// fail with its error instead of reaching Redis.
	fail func(members []string) error

	mu       sync.Mutex
	calls    []renewCall
	inFlight int
}

func (r *renewRecorder) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha != renewBatchSHA {
		return r.Client.EvalSha(ctx, sha, keys, args...)
	}
	r.mu.Lock()
	r.inFlight++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
	}()
	var call renewCall
	for _, a := range args[1:] {
		m, _ := a.(string)
		call.members = append(call.members, m)
	}
	cmd := r.run(ctx, sha, keys, call.members, args)
	call.err = cmd.Err()
	arr, _ := cmd.Val().([]any)
	for i := 1; i+2 < len(arr); i += 3 {
		code, _ := arr[i].(int64)
		call.codes = append(call.codes, code)
	}
	r.mu.Lock()
	r.calls = append(r.calls, call)
	r.mu.Unlock()
	return cmd
}

func (r *renewRecorder) run(ctx context.Context, sha string, keys, members []string, args []any) *redis.Cmd {
	if r.gate != nil {
		r.entered <- struct{}{}
		select {
		case <-r.gate:
		case <-ctx.Done():
			return redis.NewCmdResult(nil, ctx.Err())
		}
	}
	if r.fail != nil {
		if err := r.fail(members); err != nil {
			return redis.NewCmdResult(nil, err)
		}
	}
	return r.Client.EvalSha(ctx, sha, keys, args...)
}

// take returns the calls recorded since the last take.
func (r *renewRecorder) take() []renewCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls := r.calls
	r.calls = nil
	return calls
}

// busy is the number of renew_batch calls in flight.
func (r *renewRecorder) busy() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlight
}

// gated returns a recorder on rdb whose renew_batch calls wait for the test
// to close its gate; entered has room for every call the test makes.
func gated(rdb store.Client) *renewRecorder {
	return &renewRecorder{Client: rdb, entered: make(chan struct{}, 1000), gate: make(chan struct{})}
}

// waitEntered waits until n renew_batch calls are waiting at r's gate
// together. The limit only keeps a renewer that never gets there from hanging
// the test: on a healthy one this takes milliseconds.
func waitEntered(t *testing.T, r *renewRecorder, n int) {
	t.Helper()
	limit := time.After(30 * time.Second)
	for i := range n {
		select {
		case <-r.entered:
		case <-limit:
			t.Fatalf("%d renewal calls in flight together, want %d", i, n)
		}
	}
}

// renewedCounts counts, per member, the calls that named it and the calls
// that renewed it.
func renewedCounts(calls []renewCall) (named, renewed map[string]int) {
	named, renewed = map[string]int{}, map[string]int{}
	for _, c := range calls {
		for i, m := range c.members {
			named[m]++
			if i < len(c.codes) && c.codes[i] == 1 {
				renewed[m]++
			}
		}
	}
	return named, renewed
}
