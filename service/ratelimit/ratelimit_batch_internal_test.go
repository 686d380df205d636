package ratelimit

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// newOn returns a Service with the default configuration on a store on rdb.
func newOn(t *testing.T, rdb store.Client) *Service {
	t.Helper()
	st, err := store.New(rdb, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(st, RateLimitConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// keyRecorder records the keys of every script call.
type keyRecorder struct {
	*redis.Client
	calls [][]string
}

func (r *keyRecorder) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	r.calls = append(r.calls, slices.Clone(keys))
	return r.Client.EvalSha(ctx, sha, keys, args...)
}

// A call sends only the decisions still waiting for it: one whose deadline
// passed in the queue is answered unavailable without reaching Redis, and
// one whose caller left is neither sent nor answered.
func TestDecisionCallSendsOnlyLiveDecisions(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	rec := &keyRecorder{Client: rdb}
	s := newOn(t, rec)
	if err := s.st.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := s.rl.batchers[FixedWindow]
	decision := func(key string, deadline time.Time) *decisionCall {
		return &decisionCall{key: key, args: [4]int64{10, 60000, 1}, nargs: 3, deadline: deadline,
			done: make(chan decisionResult, 1)}
	}
	expired := decision("expired", time.Now().Add(-time.Millisecond))
	gone := decision("gone", time.Now().Add(time.Minute))
	gone.gone.Store(true)
	live := decision("live", time.Now().Add(time.Minute))

	b.call([]*decisionCall{expired, gone, live})

	if r := <-expired.done; !errors.Is(r.err, store.ErrUnavailable) || r.kind != "unavailable" {
		t.Errorf("decision past its deadline: %+v, want ErrUnavailable", r)
	}
	select {
	case r := <-gone.done:
		t.Errorf("decision whose caller left was answered: %+v", r)
	default:
	}
	if r := <-live.done; r.err != nil || r.v != [4]int64{1, 9, 60000, 0} {
		t.Errorf("live decision: %+v, want allowed with 9 remaining", r)
	}
	if !slices.EqualFunc(rec.calls, [][]string{{"live"}}, slices.Equal) {
		t.Errorf("script calls by keys = %v, want one call with the live decision alone", rec.calls)
	}
}

// A Cluster client sends each decision on its own: a batch names many keys,
// which would cross hash slots.
func TestNoDecisionBatchesOnACluster(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}})
	t.Cleanup(func() { _ = rdb.Close() })
	s := newOn(t, rdb)
	if s.rl.batchers != nil {
		t.Errorf("batchers on a Cluster client: %v, want none", s.rl.batchers)
	}
	single := newOn(t, redis.NewClient(&redis.Options{Addr: m.Addr()}))
	if len(single.rl.batchers) != len(limitScripts) {
		t.Errorf("batchers on a single-node client: %d, want one per algorithm", len(single.rl.batchers))
	}
}
