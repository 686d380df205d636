package locks_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// twoPrimaries passes calls to one Redis, but routes keys as a cluster of
// two primaries would (by the slot's parity), and fails every keepalive_due
// call on the down primary's shards, as a connection to it would.
type twoPrimaries struct {
	store.Client
	nodes [2]*redis.Client // never dialled: their addresses name them
	down  int

	mu    sync.Mutex
	calls [2]int // keepalive_due calls per primary
}

func (c *twoPrimaries) MasterForKey(_ context.Context, key string) (*redis.Client, error) {
	return c.nodes[store.Slot(key)%2], nil
}

func (c *twoPrimaries) ReloadState(context.Context) {}

func (c *twoPrimaries) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha != storetest.ScriptSHA(lua.Source("keepalive_due")) {
		return c.Client.EvalSha(ctx, sha, keys, args...)
	}
	node := store.Slot(keys[0]) % 2
	c.mu.Lock()
	c.calls[node]++
	c.mu.Unlock()
	if node == c.down {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errors.New("dial tcp: connect: connection refused"))
		return cmd
	}
	return c.Client.EvalSha(ctx, sha, keys, args...)
}

// TestClusterRenewerSkipsAPrimaryThatFailed: once a shard visit on a
// primary fails, the renewer visits none of that primary's other shards in
// the round (they stay claimed), and still renews the shards of the other.
func TestClusterRenewerSkipsAPrimaryThatFailed(t *testing.T) {
	m, rdb := newTestRedis(t)
	ctx := t.Context()
	c := &twoPrimaries{Client: rdb, down: 1, nodes: [2]*redis.Client{
		redis.NewClient(&redis.Options{Addr: "primary-0:6379"}), redis.NewClient(&redis.Options{Addr: "primary-1:6379"})}}
	const prefix = "lk:"
	svc := mustNew(t, c, locks.Config{RenewParallel: 1}, store.Config{KeyPrefix: prefix, Cluster: true})
	due, _ := locks.DirKeys(prefix)
	names, tokens := grantThreePerPrimary(t, svc, rdb, due)
	now := t0
	advance(m, &now, 1100*time.Millisecond)
	locks.RenewShardsNow(ctx, svc)

	if c.calls[1] != 1 {
		t.Errorf("keepalive_due calls on the primary that failed = %d, want 1 (its other shards skipped)", c.calls[1])
	}
	if c.calls[0] != 3 {
		t.Errorf("keepalive_due calls on the other primary = %d, want 3 (each of its shards)", c.calls[0])
	}
	for node, ns := range names {
		for _, name := range ns {
			shard := locks.RegistryKeyOf(prefix, true, "", "", name)
			s, err := m.ZScore(shard, locks.RegistryMember("", tokens[name], name))
			renewed := err == nil && s == float64(now.Add(time.Second).UnixMilli())
			if renewed != (node == 0) {
				t.Errorf("%s on primary %d: renewed %v (due %v, %v)", name, node, renewed, s, err)
			}
		}
	}
}

// slowMarks passes calls to one Redis, but holds every keepalive_mark call
// back until the test says a grant was handed out (or half a second
// passed), and records which came first.
type slowMarks struct {
	store.Client
	handedOut chan struct{}

	mu     sync.Mutex
	events []string
}

func (c *slowMarks) record(ev string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, ev)
}

func (c *slowMarks) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if sha != storetest.ScriptSHA(lua.Source("keepalive_mark")) {
		return c.Client.EvalSha(ctx, sha, keys, args...)
	}
	select {
	case <-c.handedOut:
	case <-time.After(500 * time.Millisecond):
	}
	cmd := c.Client.EvalSha(ctx, sha, keys, args...)
	if cmd.Err() == nil {
		c.record("marked")
	}
	return cmd
}

// TestClusterGrantIsMarkedBeforeItIsHandedOut: on a cluster, a keep-alive
// grant (and a renewal that sets a new TTL) is returned only once its slot
// is in the shard directory, so an instance that stops right after
// handing a lease out leaves it where every other renewer finds it: a mark
// sent later would die with the instance, and the lease would run out
// before a reconciliation found its shard.
func TestClusterGrantIsMarkedBeforeItIsHandedOut(t *testing.T) {
	_, rdb := newTestRedis(t)
	ctx := t.Context()
	c := &slowMarks{Client: rdb, handedOut: make(chan struct{})}
	const prefix = "lk:"
	svc := mustNew(t, c, locks.Config{}, store.Config{KeyPrefix: prefix, Cluster: true, OpTimeout: 5 * time.Second})
	due, _ := locks.DirKeys(prefix)

	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true})
	c.record("granted")
	close(c.handedOut)
	if _, err := rdb.ZScore(ctx, due, strconv.Itoa(store.Slot("orders"))).Result(); err != nil {
		t.Errorf("the directory lacks the slot of a keep-alive lease just handed out: %v", err)
	}
	c.mu.Lock()
	events := slices.Clone(c.events)
	c.mu.Unlock()
	if !slices.Equal(events, []string{"marked", "granted"}) {
		t.Errorf("events %q, want the mark before the grant is handed out", events)
	}

	// A renewal that sets a TTL, too.
	c.handedOut = make(chan struct{})
	c.events = nil
	if _, err := svc.Renew(ctx, "orders", l.Token, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	c.record("renewed")
	close(c.handedOut)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Equal(c.events, []string{"marked", "renewed"}) {
		t.Errorf("events %q, want the mark before the renewal is handed out", c.events)
	}
}

// TestClusterClaimOfAStoppedRenewerRunsOutInTime: a renewer that claimed a
// due slot and stopped before it settled it (its instance was killed)
// leaves the slot to the others once the claim runs out, early enough that
// a lease of the shortest keep-alive TTL, claimed as late as one poll after
// it fell due, is renewed by another instance one poll before it expires.
func TestClusterClaimOfAStoppedRenewerRunsOutInTime(t *testing.T) {
	m, rdb := newTestRedis(t)
	ctx := t.Context()
	const prefix, poll = "lk:", 100 * time.Millisecond
	cfg := locks.Config{RenewPoll: poll}
	scfg := store.Config{KeyPrefix: prefix, Cluster: true}
	stopped, other := mustNew(t, rdb, cfg, scfg), mustNew(t, rdb, cfg, scfg)
	ttl := 10 * poll // the default MinKeepaliveTTL
	l := mustAcquire(t, stopped, "orders", locks.AcquireRequest{TTL: ttl, Keepalive: true})
	shard := locks.RegistryKeyOf(prefix, true, "", "", "orders")
	member := locks.RegistryMember("", l.Token, "orders")

	now := t0
	advance(m, &now, ttl/3+poll)
	slots, err := locks.ClaimShards(ctx, stopped, 10)
	if err != nil || !slices.Equal(slots, []int{store.Slot("orders")}) {
		t.Fatalf("claim = %v %v, want the slot of orders", slots, err)
	}
	// The stopped instance never settles. One poll before the lease
	// expires, the other instance's renewer finds the slot due again.
	advance(m, &now, ttl-ttl/3-2*poll)
	locks.RenewShardsNow(ctx, other)
	s, err := m.ZScore(shard, member)
	if want := float64(now.Add(ttl / 3).UnixMilli()); err != nil || s != want {
		t.Fatalf("entry due at %v (%v), want renewed by the other instance: due at %v", s, err, want)
	}
}

// pipelinedTwoPrimaries is twoPrimaries with pipelines, as a cluster
// client has: in a pipeline, the keepalive_due calls on the down primary's
// shards fail as a connection to it would, and the other calls run.
type pipelinedTwoPrimaries struct {
	*twoPrimaries
	pipe *redis.Client // on the same Redis, with the hook below

	batches [2]int // renewal batch calls per primary
	// stuck, when set, holds a pipeline with the down primary's
	// keepalive_due until it is closed, as a stopped primary would until a
	// timeout; then those calls fail.
	stuck chan struct{}
}

func (c *pipelinedTwoPrimaries) Pipeline() redis.Pipeliner { return c.pipe.Pipeline() }

func (c *pipelinedTwoPrimaries) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *pipelinedTwoPrimaries) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (c *pipelinedTwoPrimaries) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var pass []redis.Cmder
		held := false
		c.mu.Lock()
		for _, cmd := range cmds {
			args := cmd.Args()
			if len(args) < 4 || args[0] != "evalsha" {
				pass = append(pass, cmd)
				continue
			}
			node := store.Slot(args[3].(string)) % 2
			if args[1] != storetest.ScriptSHA(lua.Source("keepalive_due")) {
				c.batches[node]++
				pass = append(pass, cmd)
				continue
			}
			c.calls[node]++
			if node == c.down {
				cmd.SetErr(errors.New("dial tcp: connect: connection refused"))
				held = true
				continue
			}
			pass = append(pass, cmd)
		}
		c.mu.Unlock()
		if held && c.stuck != nil {
			<-c.stuck
		}
		if len(pass) > 0 {
			_ = next(ctx, pass) // each command carries its own error
		}
		return nil
	}
}

// TestClusterPipelinedRenewerSkipsAPrimaryThatFailed: with a client that
// pipelines, as a cluster client does, every due shard's keepalive_due goes
// out in one pipeline; the shards of a primary whose calls failed get no
// renewal batch and stay claimed (their directory entries keep the claim's
// time, so they are visited again once it runs out), while the shards of
// the other primary are renewed and settled at their next due time.
func TestClusterPipelinedRenewerSkipsAPrimaryThatFailed(t *testing.T) {
	m, rdb := newTestRedis(t)
	ctx := t.Context()
	pipe := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = pipe.Close() })
	c := &pipelinedTwoPrimaries{pipe: pipe, twoPrimaries: &twoPrimaries{Client: rdb, down: 1, nodes: [2]*redis.Client{
		redis.NewClient(&redis.Options{Addr: "primary-0:6379"}), redis.NewClient(&redis.Options{Addr: "primary-1:6379"})}}}
	pipe.AddHook(c)
	const prefix = "lk:"
	svc := mustNew(t, c, locks.Config{}, store.Config{KeyPrefix: prefix, Cluster: true})
	due, _ := locks.DirKeys(prefix)
	names, tokens := grantThreePerPrimary(t, svc, rdb, due)
	now := t0
	advance(m, &now, 1100*time.Millisecond)
	locks.RenewShardsNow(ctx, svc)

	if c.calls != [2]int{3, 3} {
		t.Errorf("keepalive_due calls per primary = %v, want every shard's in the pipeline: [3 3]", c.calls)
	}
	if c.batches[1] != 0 || c.batches[0] == 0 {
		t.Errorf("renewal batches per primary = %v, want some on primary 0 and none on the primary that failed", c.batches)
	}
	claimedUntil := float64(now.Add(time.Second / 4).UnixMilli()) // a quarter of the default MinKeepaliveTTL
	for node, ns := range names {
		for _, name := range ns {
			shard := locks.RegistryKeyOf(prefix, true, "", "", name)
			s, err := m.ZScore(shard, locks.RegistryMember("", tokens[name], name))
			nextDue := float64(now.Add(time.Second).UnixMilli())
			renewed := err == nil && s == nextDue
			if renewed != (node == 0) {
				t.Errorf("%s on primary %d: renewed %v (due %v, %v)", name, node, renewed, s, err)
			}
			want := nextDue // settled at its next due time
			if node == 1 {
				want = claimedUntil // still claimed
			}
			if got, err := m.ZScore(due, strconv.Itoa(store.Slot(name))); err != nil || got != want {
				t.Errorf("%s on primary %d: directory says due at %v (%v), want %v", name, node, got, err, want)
			}
		}
	}
}

// TestClusterStuckPrimaryHoldsUpNoOtherRenewal: a primary that does not
// answer (its keepalive_due held until the test lets it fail, as a stopped
// primary until a timeout) does not hold up the renewals of the other
// primary's shards in the same round: they are renewed while its call is
// still held.
func TestClusterStuckPrimaryHoldsUpNoOtherRenewal(t *testing.T) {
	m, rdb := newTestRedis(t)
	ctx := t.Context()
	pipe := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = pipe.Close() })
	stuck := make(chan struct{})
	c := &pipelinedTwoPrimaries{pipe: pipe, stuck: stuck, twoPrimaries: &twoPrimaries{Client: rdb, down: 1, nodes: [2]*redis.Client{
		redis.NewClient(&redis.Options{Addr: "primary-0:6379"}), redis.NewClient(&redis.Options{Addr: "primary-1:6379"})}}}
	pipe.AddHook(c)
	const prefix = "lk:"
	svc := mustNew(t, c, locks.Config{}, store.Config{KeyPrefix: prefix, Cluster: true})
	due, _ := locks.DirKeys(prefix)
	names, tokens := grantThreePerPrimary(t, svc, rdb, due)
	now := t0
	advance(m, &now, 1100*time.Millisecond)
	round := make(chan struct{})
	go func() { defer close(round); locks.RenewShardsNow(ctx, svc) }()
	t.Cleanup(func() {
		select {
		case <-stuck:
		default:
			close(stuck)
		}
		<-round
	})

	nextDue := float64(now.Add(time.Second).UnixMilli())
	waitFor(t, "the healthy primary's leases are renewed while the other's call is held", func() bool {
		for _, name := range names[0] {
			shard := locks.RegistryKeyOf(prefix, true, "", "", name)
			if s, err := m.ZScore(shard, locks.RegistryMember("", tokens[name], name)); err != nil || s != nextDue {
				return false
			}
		}
		return true
	})
	select {
	case <-round:
		t.Fatal("the round ended before the stuck primary's call was let go")
	default:
	}
	close(stuck)
	<-round
	for _, name := range names[1] {
		shard := locks.RegistryKeyOf(prefix, true, "", "", name)
		if s, err := m.ZScore(shard, locks.RegistryMember("", tokens[name], name)); err == nil && s == nextDue {
			t.Errorf("%s on the stuck primary was renewed", name)
		}
	}
}

// grantThreePerPrimary grants keep-alive leases on three names of each of
// twoPrimaries' nodes (slot parity) and waits until the six grants' marks
// are in the directory's due set. It returns the names per node and each
// name's token.
func grantThreePerPrimary(t *testing.T, svc *locks.Service, rdb *redis.Client, due string) ([2][]string, map[string]string) {
	t.Helper()
	var names [2][]string
	tokens := map[string]string{}
	for i := 0; len(names[0]) < 3 || len(names[1]) < 3; i++ {
		name := fmt.Sprintf("n%d", i)
		node := store.Slot(name) % 2
		if len(names[node]) == 3 {
			continue
		}
		names[node] = append(names[node], name)
		tokens[name] = mustAcquire(t, svc, name, locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true}).Token
	}
	waitFor(t, "every grant's mark reaches the directory", func() bool {
		n, err := rdb.ZCard(t.Context(), due).Result()
		return err == nil && n == 6
	})
	return names, tokens
}
