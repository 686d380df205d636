package integration

// HTTP load on two Latchkey instances of one deployment on a Redis Cluster,
// for the failover and resharding tests: lock names taken and released,
// keep-alive leases held and inspected, rate-limit checks. Every request is
// recorded with its place on one event clock, which also stamps the
// cluster events the tests cause (a kill, a promotion, a slot move), so
// that a test asserts by order, never by elapsed time.

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/latchkey/latchkey/service/store/clustertest"
	"github.com/redis/go-redis/v9"
)

// loadOp is one request of the load, as it went.
type loadOp struct {
	Kind       string // acquire, release, inspect, check
	Name       string // the lock name or rate-limit key
	Slot       int    // the hash slot of its key
	Start, End int64  // the event clock when it was sent and answered
	Status     int
	Body       []byte
	Err        error
	Fence      int64 // acquire: the grant's; inspect: the state's
	Held       bool  // inspect: held and owned by the token sent
	LostReason string
}

// keptLease is a keep-alive lease the load holds throughout.
type keptLease struct {
	Name, Token string
	Fence       int64
	Slot        int
}

// clusterLoad drives the load; start it with run and stop it with stop.
type clusterLoad struct {
	envs  [2]*testEnv
	clock atomic.Int64

	cycled   []string                // names taken and released in turn, one worker each
	kept     []keptLease             // inspected in turn by one worker
	checks   []string                // rate-limit keys checked in turn, one worker each
	policy   string                  // the policy of the checks
	limitKey func(key string) string // the Redis key of a check's decision

	mu     sync.Mutex
	ops    []loadOp
	rounds map[string]int // completed rounds per worker

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// keptTTL is the ttl of newClusterLoad's keep-alive leases.
const keptTTL = 3 * time.Second

// newClusterLoad prepares load on a and b (instances of one deployment):
// cycled names, keep-alive leases on kept names (taken now, alternately
// through a and b, with a ttl the renewers must keep up with), and
// rate-limit keys checked under policy. The kept leases' ttl, keptTTL, is
// about as long as a failover takes here (kill to promotion: 2-5s), so a
// renewer that stalled through one would lose them, yet it leaves a busy
// machine two seconds past each due time.
func newClusterLoad(t *testing.T, a, b *testEnv, cycled, kept, checks []string, policy string) *clusterLoad {
	t.Helper()
	l := &clusterLoad{envs: [2]*testEnv{a, b}, cycled: cycled, checks: checks, policy: policy, rounds: map[string]int{},
		limitKey: a.limitKeyOf(t, policy)}
	for i, name := range kept {
		lease := l.envs[i%2].acquire(t, name, `{"ttl":"`+keptTTL.String()+`","keepalive":true}`)
		l.kept = append(l.kept, keptLease{Name: name, Token: lease.Token, Fence: lease.Fence, Slot: l.lockSlot(name)})
	}
	return l
}

// newClusterPair starts two instances of one deployment on cl, their
// renewers running, with the policies made to fail closed (a decision Redis
// could not make is a 503, never an uncounted 200) and decisions given as
// long as any Redis call (a loaded machine must not turn a slow answer into
// a 503 on a primary that is up). It returns them with a client on every
// node of cl and its three primaries.
func newClusterPair(t *testing.T, cl *clustertest.Cluster, policies ...ratelimit.Policy) (a, b *testEnv, nodes map[string]*redis.Client, prims []clusterNode) {
	t.Helper()
	for i := range policies {
		policies[i].Fail = ratelimit.FailClosed
	}
	slow := withServiceConfig(func(s *serviceConfig) { s.OpTimeout, s.RateLimit.Timeout = 2*time.Second, 2*time.Second })
	a = newTestEnv(t, withCluster(cl.URL), withRenewer(instancePoll), withPolicies(policies...), slow)
	b = newTestEnv(t, beside(a), withRenewer(instancePoll), withPolicies(policies...), slow)
	nodes = nodeClients(t, cl)
	if prims = primaries(topology(t, nodes)); len(prims) != 3 {
		t.Fatalf("%d primaries, want 3", len(prims))
	}
	return a, b, nodes, prims
}

// limitKeyOf returns the Redis key of a decision under the named policy
// for a key.
func (e *testEnv) limitKeyOf(t *testing.T, policyName string) func(key string) string {
	t.Helper()
	pol, err := e.Svc.Policy(policyName)
	if err != nil {
		t.Fatal(err)
	}
	return func(key string) string { return e.Svc.Keys(pol, []string{key})[0] }
}

// tick advances the event clock and returns its new value: the stamp of a
// cluster event the test caused or observed.
func (l *clusterLoad) tick() int64 { return l.clock.Add(1) }

func (l *clusterLoad) lockSlot(name string) int {
	return store.Slot(locks.KeysOf(l.envs[0].Prefix, name).Lock)
}

// send makes one request through instance i; record keeps it.
func (l *clusterLoad) send(ctx context.Context, i int, kind, name string, slot int, method, path, body string, headerPairs ...string) loadOp {
	op := loadOp{Kind: kind, Name: name, Slot: slot, Start: l.tick()}
	r := l.envs[i%2].send(ctx, method, path, body, headerPairs...)
	op.End = l.tick()
	op.Status, op.Body, op.Err = r.Status, r.Body, r.Err
	if ctx.Err() != nil {
		op.Kind = "cancelled" // the load was stopped mid-request: not an outcome
	}
	return op
}

// record keeps op.
func (l *clusterLoad) record(op loadOp) {
	l.mu.Lock()
	l.ops = append(l.ops, op)
	l.mu.Unlock()
}

// run starts every worker.
func (l *clusterLoad) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	t.Cleanup(l.stop)
	for w, name := range l.cycled {
		l.worker(ctx, "cycle "+name, func(round int) { l.cycle(ctx, w+round, name) })
	}
	if len(l.kept) > 0 {
		l.worker(ctx, "inspect", func(round int) {
			for i, k := range l.kept {
				l.inspectKept(ctx, round+i, k)
			}
		})
	}
	for w, key := range l.checks {
		l.worker(ctx, "check "+key, func(round int) { l.check(ctx, w+round, key) })
	}
}

// worker runs one round after another until the load stops.
func (l *clusterLoad) worker(ctx context.Context, name string, round func(int)) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for r := 0; ctx.Err() == nil; r++ {
			round(r)
			l.mu.Lock()
			l.rounds[name]++
			l.mu.Unlock()
		}
	}()
}

// cycle takes name and releases it.
func (l *clusterLoad) cycle(ctx context.Context, i int, name string) {
	slot := l.lockSlot(name)
	op := l.send(ctx, i, "acquire", name, slot, "POST", "/v1/locks/"+name, `{"ttl":"3s"}`)
	var lease leaseJSON
	if op.Status == http.StatusCreated {
		_ = json.Unmarshal(op.Body, &lease)
		op.Fence = lease.Fence
	}
	l.record(op)
	switch op.Status {
	case http.StatusCreated:
		l.record(l.send(ctx, i+1, "release", name, slot, "DELETE", "/v1/locks/"+name, "", "Lock-Token", lease.Token))
	case http.StatusConflict:
		time.Sleep(10 * time.Millisecond) // held after an answer that was lost: its ttl runs out
	}
}

// inspectKept reads a kept lease as its holder sees it.
func (l *clusterLoad) inspectKept(ctx context.Context, i int, k keptLease) {
	op := l.send(ctx, i, "inspect", k.Name, k.Slot, "GET", "/v1/locks/"+k.Name, "", "Lock-Token", k.Token)
	var st stateJSON
	if op.Status == http.StatusOK && json.Unmarshal(op.Body, &st) == nil {
		op.Held, op.Fence, op.LostReason = st.Held && st.ownedIs(true), st.Fence, st.LostReason
	}
	l.record(op)
}

// check asks for one rate-limit decision on key.
func (l *clusterLoad) check(ctx context.Context, i int, key string) {
	l.record(l.send(ctx, i, "check", key, store.Slot(l.limitKey(key)), "POST", "/v1/ratelimit/check", `{"policy":"`+l.policy+`","key":"`+key+`"}`))
}

// waitRounds waits until every worker has completed n more rounds, or
// fails t after d (a bound, not a measure).
func (l *clusterLoad) waitRounds(t *testing.T, n int, d time.Duration) {
	t.Helper()
	l.mu.Lock()
	from := make(map[string]int, len(l.rounds))
	for w, r := range l.rounds {
		from[w] = r
	}
	l.mu.Unlock()
	eventually(t, d, "every load worker completes more rounds", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.rounds) == 0 {
			return false
		}
		for w, r := range l.rounds {
			if r < from[w]+n {
				return false
			}
		}
		return true
	})
}

// stop ends the load and waits for its workers.
func (l *clusterLoad) stop() {
	if l.cancel != nil {
		l.cancel()
	}
	l.wg.Wait()
}

// recorded returns the ops the load recorded, answered ones only, in the
// order they were sent.
func (l *clusterLoad) recorded() []loadOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ops []loadOp
	for _, op := range l.ops {
		if op.Kind != "cancelled" {
			ops = append(ops, op)
		}
	}
	slices.SortFunc(ops, func(a, b loadOp) int { return int(a.Start - b.Start) })
	return ops
}

// wantAnswered fails t for a request that got no HTTP answer or a 5xx other
// than 503: the server must never fail with 500, whatever the cluster does.
func wantAnswered(t *testing.T, ops []loadOp) {
	t.Helper()
	bad := 0
	for _, op := range ops {
		if op.Err != nil || op.Status >= 500 && op.Status != http.StatusServiceUnavailable {
			if bad++; bad <= 10 {
				t.Errorf("%s %s (slot %d): status %d, error %v, body %s", op.Kind, op.Name, op.Slot, op.Status, op.Err, op.Body)
			}
		}
	}
	if bad > 10 {
		t.Errorf("... %d such requests in all", bad)
	}
}

// wantFencesIncrease fails t unless the fences granted on every cycled
// name strictly increase in the order they were granted (one worker per
// name: that is the order of the requests).
func wantFencesIncrease(t *testing.T, ops []loadOp) {
	t.Helper()
	last := map[string]int64{}
	grants := 0
	for _, op := range ops {
		if op.Kind != "acquire" || op.Status != http.StatusCreated {
			continue
		}
		grants++
		if op.Fence <= last[op.Name] {
			t.Errorf("%s: fence %d granted after %d", op.Name, op.Fence, last[op.Name])
		}
		last[op.Name] = op.Fence
	}
	if grants == 0 {
		t.Error("the load granted no lease")
	}
}

// wantKeptHeld fails t unless every inspection of a kept lease whose slot
// is not excused(slot) found it held by its token with its fence and no
// lost reason, and there were some.
func wantKeptHeld(t *testing.T, l *clusterLoad, ops []loadOp, excused func(slot int) bool) {
	t.Helper()
	fence := map[string]int64{}
	for _, k := range l.kept {
		fence[k.Name] = k.Fence
	}
	seen := 0
	for _, op := range ops {
		if op.Kind != "inspect" || excused(op.Slot) {
			continue
		}
		seen++
		if op.Status != http.StatusOK || !op.Held || op.Fence != fence[op.Name] || op.LostReason != "" {
			t.Errorf("kept lease %s (slot %d) at %d: status %d, held %v, fence %d (want %d), lost reason %q",
				op.Name, op.Slot, op.Start, op.Status, op.Held, op.Fence, fence[op.Name], op.LostReason)
		}
	}
	if seen == 0 {
		t.Error("no kept lease was inspected")
	}
}

// wantRenewedOn waits until every kept lease whose slot is not excused(slot)
// has been renewed past the expiry it had when called, by more than its
// ttl: the renewers kept it after whatever the test did to the cluster,
// rather than the lease outliving that by its last ttl. It fails t when a
// lease is lost instead, or after d (a bound, not a measure).
func wantRenewedOn(t *testing.T, l *clusterLoad, excused func(slot int) bool, d time.Duration) {
	t.Helper()
	const ttl = keptTTL
	state := func(i int, k keptLease) stateJSON {
		st := l.envs[i%2].inspectAs(t, k.Name, k.Token)
		if !st.Held || !st.ownedIs(true) || st.Fence != k.Fence || st.ExpiresAt == nil {
			t.Fatalf("kept lease %s lost: %v, want held with fence %d", k.Name, st, k.Fence)
		}
		return st
	}
	past := map[string]time.Time{}
	for i, k := range l.kept {
		if !excused(k.Slot) {
			past[k.Name] = state(i, k).ExpiresAt.Add(ttl)
		}
	}
	eventually(t, d, "every kept lease renewed past one more ttl", func() bool {
		for i, k := range l.kept {
			if until, ok := past[k.Name]; ok && !state(i, k).ExpiresAt.After(until) {
				return false
			}
		}
		return true
	})
}
