package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/store"
	"github.com/latchkey/latchkey/service/store/clustertest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { clustertest.Main(m) }

// keysOnEveryPrimary returns one key per primary of rdb, named after n.
func keysOnEveryPrimary(t *testing.T, rdb *redis.ClusterClient, n string) map[string]string {
	t.Helper()
	keys := map[string]string{} // primary address: key
	for i := 0; len(keys) < 3 && i < 1000; i++ {
		key := fmt.Sprintf("%s-%d", n, i)
		node, err := rdb.MasterForKey(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := keys[node.Options().Addr]; !ok {
			keys[node.Options().Addr] = key
		}
	}
	if len(keys) != 3 {
		t.Fatalf("keys on %d primaries, want 3", len(keys))
	}
	return keys
}

// On a cluster client the store is in cluster mode, is ready, and has its
// scripts on every primary and every replica after LoadScripts.
func TestClusterLoadsScriptsOnEveryNode(t *testing.T) {
	c := clustertest.Shared(t)
	rdb := c.Client(t)
	st := newStore(t, rdb, store.Config{})
	if !st.Config().Cluster {
		t.Error("Config().Cluster = false on a cluster client")
	}
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatalf("LoadScripts = %v", err)
	}
	var nodes atomic.Int64
	err := rdb.ForEachShard(t.Context(), func(ctx context.Context, n *redis.Client) error {
		exists, err := n.ScriptExists(ctx, incr.SHA(), noop.SHA()).Result()
		if err != nil {
			return err
		}
		if !exists[0] || !exists[1] {
			return fmt.Errorf("%s: scripts loaded %v, want both", n.Options().Addr, exists)
		}
		nodes.Add(1)
		return nil
	})
	if err != nil || nodes.Load() != 6 {
		t.Errorf("scripts on %d nodes: %v; want all 6", nodes.Load(), err)
	}
	if err := st.Ready(t.Context()); err != nil {
		t.Errorf("Ready = %v", err)
	}
}

// A primary that lost its scripts (SCRIPT FLUSH, or a replica promoted
// without them) answers NOSCRIPT; the store loads the script on that node
// and the call succeeds, on keys of every primary.
func TestClusterNoScriptHealsOnTheNodeThatAnswered(t *testing.T) {
	c := clustertest.Shared(t)
	c.Flush(t)
	rdb := c.Client(t)
	reg := prometheus.NewRegistry()
	st := newStore(t, rdb, store.Config{Registerer: reg})
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	for addr, key := range keysOnEveryPrimary(t, rdb, "noscript") {
		node, err := rdb.MasterForKey(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if err := node.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		if res, err := st.Run(t.Context(), incr, []string{key}); err != nil || res != int64(1) {
			t.Errorf("%s: Run after SCRIPT FLUSH on the key's primary = %v, %v; want 1", addr, res, err)
		}
	}
	if got := storetest.CounterValue(t, reg, "latchkey_script_reloads_total"); got != 3 {
		t.Errorf("latchkey_script_reloads_total = %v, want 3 (one per flushed primary)", got)
	}
}

// With MinReplicas the script and WAIT run on a connection of the primary
// that owns the keys' slot: keys on every primary succeed with one replica
// each, and asking for two (each primary has one) is a *ReplicationError
// after the change is made.
func TestClusterRunReplicatedWaitsOnTheKeysPrimary(t *testing.T) {
	c := clustertest.Shared(t)
	c.Flush(t)
	rdb := c.Client(t)
	one := newStore(t, rdb, store.Config{MinReplicas: 1})
	two := newStore(t, rdb, store.Config{MinReplicas: 2})
	if err := one.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	for addr, key := range keysOnEveryPrimary(t, rdb, "wait") {
		if res, err := one.RunReplicated(t.Context(), incr, []string{key}); err != nil || res != int64(1) {
			t.Errorf("%s: RunReplicated with 1 replica = %v, %v; want 1", addr, res, err)
		}
		_, err := two.RunReplicated(t.Context(), incr, []string{key})
		var rerr *store.ReplicationError
		if !errors.As(err, &rerr) || rerr.Acked != 1 || rerr.Want != 2 {
			t.Errorf("%s: RunReplicated with 2 replicas = %v, want a *ReplicationError{1, 2}", addr, err)
		}
		if n, err := rdb.Get(t.Context(), key).Int(); err != nil || n != 2 {
			t.Errorf("%s: %s = %d, %v; want 2: both changes made", addr, key, n, err)
		}
	}
}

// Readiness with MinReplicas counts every primary's replicas: each has
// one, so one required is ready and two is a *ReplicasError naming a
// primary with one connected.
func TestClusterReadyCountsEveryPrimarysReplicas(t *testing.T) {
	c := clustertest.Shared(t)
	rdb := c.Client(t)
	if err := newStore(t, rdb, store.Config{MinReplicas: 1}).Ready(t.Context()); err != nil {
		t.Errorf("Ready with 1 replica required = %v, want nil", err)
	}
	err := newStore(t, rdb, store.Config{MinReplicas: 2}).Ready(t.Context())
	var short *store.ReplicasError
	if !errors.As(err, &short) || short.Connected != 1 || short.Required != 2 || short.Primary == "" || !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Ready with 2 replicas required = %v, want a *ReplicasError{primary, 1, 2}", err)
	}
}

// A replica promoted by a failover already has the scripts LoadScripts
// sent at start: a call on its slot runs without a NOSCRIPT reload.
func TestClusterPromotedReplicaHasTheScripts(t *testing.T) {
	c := clustertest.Shared(t)
	rdb := c.Client(t)
	reg := prometheus.NewRegistry()
	st := newStore(t, rdb, store.Config{Registerer: reg})
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	key := "promoted"
	primary, err := rdb.MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	replica := replicaOf(t, rdb, primary)
	// A graceful failover: the replica takes over once it has every write.
	if err := replica.Do(t.Context(), "cluster", "failover").Err(); err != nil {
		t.Fatal(err)
	}
	promoted(t, replica, func() bool {
		rdb.ReloadState(t.Context())
		node, err := rdb.MasterForKey(t.Context(), key)
		return err == nil && node.Options().Addr == replica.Options().Addr
	})
	if _, err := st.Run(t.Context(), incr, []string{key}); err != nil {
		t.Fatalf("Run on the promoted replica's slot = %v", err)
	}
	if got := storetest.CounterValue(t, reg, "latchkey_script_reloads_total"); got != 0 {
		t.Errorf("latchkey_script_reloads_total = %v, want 0: the promoted replica had the scripts", got)
	}
}

// promoted waits until done says replica was promoted, failing t after a
// minute (a hang guard, not a measure).
func promoted(t *testing.T, replica *redis.Client, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("the replica %s was not promoted within a minute", replica.Options().Addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replicaOf returns a client of primary's replica, closed when t ends.
func replicaOf(t *testing.T, rdb *redis.ClusterClient, primary *redis.Client) *redis.Client {
	t.Helper()
	id, err := primary.Do(t.Context(), "cluster", "myid").Text()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var addr string
	err = rdb.ForEachSlave(t.Context(), func(ctx context.Context, n *redis.Client) error {
		info, err := n.Do(ctx, "cluster", "nodes").Text()
		if err != nil {
			return err
		}
		for line := range strings.Lines(info) {
			f := strings.Fields(line)
			if len(f) > 3 && strings.Contains(f[2], "myself") && f[3] == id {
				mu.Lock()
				addr = n.Options().Addr
				mu.Unlock()
			}
		}
		return nil
	})
	if err != nil || addr == "" {
		t.Fatalf("no replica of %s found: %v", primary.Options().Addr, err)
	}
	r := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// NOSCRIPT heals where the call goes: with the scripts flushed on every
// primary, a call on one key loads its script (SCRIPT LOAD on every node of
// the client's view) and runs by SHA on that key's primary.
func TestClusterNoScriptHealsOnTheKeysPrimary(t *testing.T) {
	c := clustertest.Shared(t)
	rdb := c.Client(t)
	st := newStore(t, rdb, store.Config{})
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	key := "heal-0"
	owner, err := rdb.MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ForEachMaster(t.Context(), func(ctx context.Context, n *redis.Client) error {
		return n.ScriptFlush(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Run(t.Context(), incr, []string{key}); err != nil || res != int64(1) {
		t.Fatalf("Run on %s after SCRIPT FLUSH on every primary = %v, %v; want 1", owner.Options().Addr, res, err)
	}
	var (
		mu     sync.Mutex // ForEachMaster calls back on every primary at once
		loaded []string
	)
	if err := rdb.ForEachMaster(t.Context(), func(ctx context.Context, n *redis.Client) error {
		exists, err := n.ScriptExists(ctx, incr.SHA()).Result()
		if err != nil {
			return err
		}
		if exists[0] {
			mu.Lock()
			defer mu.Unlock()
			loaded = append(loaded, n.Options().Addr)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(loaded, owner.Options().Addr) {
		t.Errorf("after the reload the script is on primaries %v, want %s, the key's, among them", loaded, owner.Options().Addr)
	}
}

// On a cluster RunPipelined sends each primary's calls to that primary and
// answers every call: calls on keys of every primary run where their keys
// live, a primary whose script cache was flushed loads the script and runs
// its calls once each, and a script error stays with its own call.
func TestClusterRunPipelinedAnswersEachCallOnItsPrimary(t *testing.T) {
	c := clustertest.Shared(t)
	c.Flush(t)
	rdb := c.Client(t)
	reg := prometheus.NewRegistry()
	st := newStore(t, rdb, store.Config{Registerer: reg})
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	keys := keysOnEveryPrimary(t, rdb, "pipelined")
	var calls []store.Call
	var flushed, text string
	for _, key := range keys {
		calls = append(calls, store.Call{Script: incr, Keys: []string{key}}, store.Call{Script: incr, Keys: []string{key}})
		if flushed == "" {
			flushed = key
		} else if text == "" {
			text = key + ":text"
		}
	}
	if err := rdb.Set(t.Context(), text, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	calls = append(calls, store.Call{Script: incr, Keys: []string{text}})
	node, err := rdb.MasterForKey(t.Context(), flushed)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	res, errs := st.RunPipelined(t.Context(), calls)
	for i := 0; i+1 < len(calls)-1; i += 2 {
		if errs[i] != nil || errs[i+1] != nil || res[i] != int64(1) || res[i+1] != int64(2) {
			t.Errorf("%s: %v %v, %v %v; want 1 then 2", calls[i].Keys[0], res[i], errs[i], res[i+1], errs[i+1])
		}
	}
	if last := len(calls) - 1; errs[last] == nil || errors.Is(errs[last], store.ErrUnavailable) {
		t.Errorf("INCR of a string = %v, %v; want the script's error", res[last], errs[last])
	}
	if got := storetest.CounterValue(t, reg, "latchkey_script_reloads_total"); got < 1 {
		t.Errorf("latchkey_script_reloads_total = %v, want the flushed primary's script reloaded", got)
	}
}

// staleView is a cluster client whose view of the slots has not caught up
// with a failover: it names the old primary as the primary of every key.
type staleView struct {
	*redis.ClusterClient
	old *redis.Client
}

func (v staleView) MasterForKey(context.Context, string) (*redis.Client, error) { return v.old, nil }

// NOSCRIPT from a replica promoted without the scripts heals on the node
// that answered it, even while the client's view of the slots still names
// the old primary: the call, redirected by MOVED to the new primary, which
// answers NOSCRIPT, succeeds, and leaves the script on the new primary.
func TestClusterNoScriptAfterFailoverHealsOnTheNodeThatAnswered(t *testing.T) {
	c := clustertest.Shared(t)
	rdb := c.Client(t)
	key := "noscript-failover"
	if err := rdb.Del(t.Context(), key).Err(); err != nil {
		t.Fatal(err)
	}
	primary, err := rdb.MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	st := newStore(t, staleView{rdb, primary}, store.Config{Registerer: reg, Cluster: true})
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	replica := replicaOf(t, rdb, primary)
	if err := replica.Do(t.Context(), "cluster", "failover").Err(); err != nil {
		t.Fatal(err)
	}
	promoted(t, replica, func() bool {
		role, err := replica.Do(t.Context(), "role").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
	// The promoted replica restarted empty, as far as scripts go.
	if err := replica.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Run(t.Context(), incr, []string{key}); err != nil || res != int64(1) {
		t.Fatalf("Run on the failed-over slot = %v, %v; want 1", res, err)
	}
	if got := storetest.CounterValue(t, reg, "latchkey_script_reloads_total"); got != 1 {
		t.Errorf("latchkey_script_reloads_total = %v, want 1", got)
	}
	exists, err := replica.ScriptExists(t.Context(), incr.SHA()).Result()
	if err != nil || !exists[0] {
		t.Errorf("SCRIPT EXISTS on the new primary = %v, %v; want the script loaded where NOSCRIPT came from", exists, err)
	}
	if res, err := st.Run(t.Context(), incr, []string{key}); err != nil || res != int64(2) {
		t.Errorf("Run again = %v, %v; want 2", res, err)
	}
	if got := storetest.CounterValue(t, reg, "latchkey_script_reloads_total"); got != 1 {
		t.Errorf("latchkey_script_reloads_total = %v after a second call, want still 1", got)
	}
}

// A call that could not connect to the primary its client named (a
// failover the client's view had not caught up with) is sent again, once,
// to the primary the reloaded view names: it succeeds, and ran once.
func TestClusterCallAfterADeadPrimaryGoesToTheNewOne(t *testing.T) {
	c := clustertest.Shared(t)
	rdb := c.Client(t)
	key := "rerouted"
	if err := rdb.Del(t.Context(), key).Err(); err != nil {
		t.Fatal(err)
	}
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = dead.Close() })
	cc := &storetest.DeadPrimary{ClusterClient: rdb, Dead: dead}
	st := newStore(t, cc, store.Config{Cluster: true})
	if res, err := st.Run(t.Context(), incr, []string{key}); err != nil || res != int64(1) {
		t.Fatalf("Run after the dead primary = %v, %v; want 1, run once on the new primary", res, err)
	}
	if got := cc.Dials.Load(); got != 1 {
		t.Errorf("calls to the dead primary = %d, want 1", got)
	}
}

// A pipeline that could not connect to the primary its client named (the
// view not yet caught up with a failover) is sent again, once, to the
// primaries the reloaded view names: every call, on every primary, runs
// once and succeeds, as Run's call does.
func TestClusterRunPipelinedAfterADeadPrimaryGoesToTheNewOnes(t *testing.T) {
	c := clustertest.Shared(t)
	rdb := c.Client(t)
	keys := keysOnEveryPrimary(t, rdb, "pipelined-rerouted")
	var calls []store.Call
	for _, key := range keys {
		if err := rdb.Del(t.Context(), key).Err(); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, store.Call{Script: incr, Keys: []string{key}})
	}
	// As a cluster client's node clients are: no retries, so that the
	// refused dial comes back as it is.
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = dead.Close() })
	cc := &storetest.DeadPrimary{ClusterClient: rdb, Dead: dead}
	st := newStore(t, cc, store.Config{Cluster: true})
	if err := st.LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	res, errs := st.RunPipelined(t.Context(), calls)
	for i, c := range calls {
		if errs[i] != nil || res[i] != int64(1) {
			t.Errorf("%s after the dead primary = %v, %v; want 1, run once on its new primary", c.Keys[0], res[i], errs[i])
		}
	}
	if !cc.Reloaded.Load() {
		t.Error("the client's view was never reloaded: the calls did not meet the dead primary")
	}
}
