package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// renewGate holds renew_batch calls until the test opens it, after telling
// the test each call that waits. One gate may serve several instances.
type renewGate struct {
	entered chan struct{}
	open    chan struct{}
}

// renewRecorder passes every call through, holding renew_batch calls at its
// gate until it opens, and counts per registry member the renew_batch calls
// that named it and those that renewed it (code 1).
type renewRecorder struct {
	store.Client
	gate *renewGate

	mu       sync.Mutex
	named    map[string]int
	renewed  map[string]int
	inFlight int
}

func (r *renewRecorder) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha != renewBatchSHA {
		return r.Client.EvalSha(ctx, sha, keys, args...)
	}
	r.mu.Lock()
	r.inFlight++
	r.mu.Unlock()
	select {
	case <-r.gate.open:
	default:
		r.gate.entered <- struct{}{}
		<-r.gate.open
	}
	cmd := r.Client.EvalSha(ctx, sha, keys, args...)
	arr, _ := cmd.Val().([]any)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight--
	for i, a := range args[1:] {
		m, _ := a.(string)
		r.named[m]++
		if j := 1 + 3*i; j < len(arr) {
			if code, _ := arr[j].(int64); code == 1 {
				r.renewed[m]++
			}
		}
	}
	return cmd
}

// take returns the counts since the last take.
func (r *renewRecorder) take() (named, renewed map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	named, renewed = r.named, r.renewed
	r.named, r.renewed = map[string]int{}, map[string]int{}
	return named, renewed
}

func (r *renewRecorder) busy() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlight
}

// makeAllDue moves the next renewal of every registered lease under prefix
// to Redis's current time, in one command, and returns their members.
func makeAllDue(t *testing.T, rdb redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx := t.Context()
	registry := locks.RegistryKey(prefix)
	members, err := rdb.ZRange(ctx, registry, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE: %v", err)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	zs := make([]redis.Z, len(members))
	for i, m := range members {
		zs[i] = redis.Z{Score: float64(now.UnixMilli()), Member: m}
	}
	if err := rdb.ZAddArgs(ctx, registry, redis.ZAddArgs{XX: true, Members: zs}).Err(); err != nil {
		t.Fatalf("ZADD: %v", err)
	}
	return members
}

// noneDue reports whether no lease under prefix is due by Redis's clock.
func noneDue(t *testing.T, rdb redis.UniversalClient, prefix string) bool {
	t.Helper()
	now, err := rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	n, err := rdb.ZCount(t.Context(), locks.RegistryKey(prefix), "-inf", fmt.Sprint(now.UnixMilli())).Result()
	if err != nil {
		t.Fatalf("ZCOUNT: %v", err)
	}
	return n == 0
}

// Two instances, each with several renewal batches in flight, race for the
// same due leases on a real Redis: every lease is renewed exactly once per
// due time between them. The due times are set by the test (the leases' own
// are 20s away), so no timing decides the outcome.
func TestKeepaliveTwoInstancesParallelBatchesRenewOncePerDueTime(t *testing.T) {
	singleNode(t)
	const leases, batch, parallel = 200, 10, 4
	rdb, _ := newRedis(t)
	prefix := uniquePrefix()
	gate := &renewGate{entered: make(chan struct{}, 64), open: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-gate.open:
		default:
			close(gate.open)
		}
	})
	cfg := withServiceConfig(func(sc *serviceConfig) {
		sc.RenewBatch, sc.RenewParallel = batch, parallel
		sc.RenewPoll = 2 * time.Millisecond
		sc.OpTimeout = 10 * time.Second // calls wait at the gate
	})
	recA := &renewRecorder{Client: rdb, gate: gate, named: map[string]int{}, renewed: map[string]int{}}
	recB := &renewRecorder{Client: rdb, gate: gate, named: map[string]int{}, renewed: map[string]int{}}
	a := newTestEnv(t, withRedisClient(rdb, ""), withPrefix(prefix), withRenewer(instancePoll), withClientOf(func(redis.UniversalClient) store.Client { return recA }), cfg)
	b := newTestEnv(t, withRedisClient(rdb, ""), withPrefix(prefix), withRenewer(instancePoll), withClientOf(func(redis.UniversalClient) store.Client { return recB }), cfg)
	for i := range leases {
		if _, err := a.Svc.Acquire(t.Context(), fmt.Sprintf("ka-par-%03d", i),
			locks.AcquireRequest{TTL: time.Minute, Keepalive: true}); err != nil {
			t.Fatal(err)
		}
	}

	for round := 1; round <= 3; round++ {
		recA.take()
		recB.take()
		members := makeAllDue(t, rdb, prefix)
		if len(members) != leases {
			t.Fatalf("round %d: %d leases registered, want %d", round, len(members), leases)
		}
		if round == 1 {
			// Both instances listed the same first batch × parallel due
			// leases before any renewal ran: each of them is raced for.
			for range 2 * parallel {
				select {
				case <-gate.entered:
				case <-time.After(30 * time.Second): // only against a hang
					t.Fatalf("not every renewal batch of both instances got in flight")
				}
			}
			close(gate.open)
		}
		eventually(t, 30*time.Second, "every lease renewed and no renewal call in flight", func() bool {
			return noneDue(t, rdb, prefix) && recA.busy() == 0 && recB.busy() == 0
		})
		namedA, renewedA := recA.take()
		namedB, renewedB := recB.take()
		raced, total := 0, 0
		for _, m := range members {
			got := renewedA[m] + renewedB[m]
			if got != 1 {
				t.Errorf("round %d: %s renewed %d times, want once", round, m, got)
			}
			if namedA[m] > 0 && namedB[m] > 0 {
				raced++
			}
			total += got
		}
		if round == 1 && raced < batch*parallel {
			t.Errorf("round 1: %d leases raced for by both instances, want at least %d", raced, batch*parallel)
		}
		t.Logf("round %d: %d renewals, %d leases named by both instances", round, total, raced)
	}
	if got := metricValue(t, a, "latchkey_keepalive_renewals_total") + metricValue(t, b, "latchkey_keepalive_renewals_total"); got != 3*leases {
		t.Errorf("renewals by both instances = %v, want %d (one per lease and due time)", got, 3*leases)
	}
	if got := metricValue(t, a, `latchkey_keepalive_renewal_failures_total{reason="store"}`) +
		metricValue(t, b, `latchkey_keepalive_renewal_failures_total{reason="store"}`); got != 0 {
		t.Errorf(`renewal failures{reason="store"} = %v, want 0`, got)
	}
}
