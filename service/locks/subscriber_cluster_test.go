package locks_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/latchkey/latchkey/service/store/clustertest"
	"github.com/redis/go-redis/v9"
)

// namesPerPrimary returns, for each primary of rdb, n lock names of svc on
// n different slots of that primary, so that one sharded connection carries
// channels of several slots.
func namesPerPrimary(t *testing.T, rdb *redis.ClusterClient, svc *locks.Service, n int) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	slots := map[int]bool{}
	for i := 0; i < 10000; i++ {
		name := fmt.Sprintf("sub-%d", i)
		ch := locks.Channel(svc, name)
		node, err := rdb.MasterForKey(t.Context(), ch)
		if err != nil {
			t.Fatal(err)
		}
		addr := node.Options().Addr
		if len(out[addr]) < n && !slots[store.Slot(ch)] {
			slots[store.Slot(ch)] = true
			out[addr] = append(out[addr], name)
		}
	}
	if len(out) != 3 {
		t.Fatalf("names on %d primaries, want 3", len(out))
	}
	return out
}

// failOver SIGKILLs the primary serving key (or, with pause, SIGSTOPs it),
// waits until its replica took its slots over (as the replica itself
// says), and restarts (or resumes) the node, which rejoins as a replica.
func failOver(t *testing.T, c *clustertest.Cluster, rdb *redis.ClusterClient, key string, pause bool) {
	t.Helper()
	rdb.ReloadState(t.Context())
	// The client's slot map is reloaded lazily, so it may still name the
	// node killed by the previous failover (a replica now): wait until the
	// node it names says it is a primary and has its replica attached.
	var primary *redis.Client
	var replicaAddr string
	eventuallyTrue(t, "the slot of "+key+" has a primary with a replica", func() bool {
		rdb.ReloadState(t.Context())
		var err error
		primary, err = rdb.MasterForKey(t.Context(), key)
		if err != nil {
			return false
		}
		role, err := primary.Do(t.Context(), "role").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			return false
		}
		replicaAddr = replicaOf(t.Context(), primary)
		return replicaAddr != ""
	})
	replica := redis.NewClient(&redis.Options{Addr: replicaAddr, MaxRetries: -1})
	defer func() { _ = replica.Close() }()
	addr := primary.Options().Addr
	if pause {
		c.Pause(t, addr)
	} else {
		c.Kill(t, addr)
	}
	eventuallyTrue(t, "the replica "+replicaAddr+" of "+addr+" is promoted", func() bool {
		role, err := replica.Do(t.Context(), "role").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
	if pause {
		c.Resume(t, addr)
	} else {
		c.Restart(t, addr)
	}
	rdb.ReloadState(t.Context())
}

// eventuallyTrue polls cond until it holds, failing t after a minute (a
// hang guard, not a measure).
func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Sharded subscriptions survive failovers: with channels of two slots on
// every primary, each primary killed in turn (and restarted, a replica
// now), then one stopped (SIGSTOP) until its replica took over, every channel receives a wake-up published after the last
// failover, and a waiter on every name is granted by the wake-up of its
// holder's release (counted). go-redis alone re-subscribes a connection's channels of every
// slot with one SSUBSCRIBE, which Redis refuses, and the wake-ups are lost.
func TestClusterShardedSubscriptionsSurviveFailovers(t *testing.T) {
	c := clustertest.Start(t)
	rdb := c.Client(t)
	allowPartialCoverage(t, c)
	svc := mustNew(t, rdb, locks.Config{SubscriberPing: 500 * time.Millisecond}, store.Config{Cluster: true, OpTimeout: time.Second})
	t.Cleanup(func() { _ = svc.Close() })
	byPrimary := namesPerPrimary(t, rdb, svc, 2)
	hints := map[string]<-chan string{}
	for _, names := range byPrimary {
		for _, name := range names {
			ready, h, leave := locks.ListenHints(svc, name)
			t.Cleanup(leave)
			hints[name] = h
			select {
			case <-ready:
			case <-time.After(time.Minute): // hang guard
				t.Fatalf("the subscription of %s was not confirmed", name)
			}
		}
	}
	for _, names := range byPrimary {
		failOver(t, c, rdb, locks.Channel(svc, names[0]), false)
	}
	for _, names := range byPrimary { // one primary, as a hung machine
		failOver(t, c, rdb, locks.Channel(svc, names[1]), true)
		break
	}
	for name, h := range hints {
		ch := locks.Channel(svc, name)
		got := false
		eventuallyTrue(t, "a wake-up published on "+ch+" after the failovers arrives", func() bool {
			_ = rdb.SPublish(t.Context(), ch, "probe").Err()
			deadline := time.After(200 * time.Millisecond)
			for {
				select {
				case hint := <-h:
					if hint == "probe" {
						got = true
						return true
					}
				case <-deadline:
					return false
				}
			}
		})
		if !got {
			t.Errorf("%s: no wake-up", name)
		}
	}

	// A waiter on every name, on every primary, is granted once the holder
	// releases, by a wake-up: the holder's lease (a minute) outlasts the
	// wait, so the waiter's only timed re-check is at the wait's end, and
	// each channel's listener counts the release's wake-up.
	type result struct {
		name string
		err  error
	}
	granted := make(chan result, len(hints))
	for name := range hints {
		held, err := svc.Acquire(t.Context(), name, locks.AcquireRequest{TTL: time.Minute})
		if err != nil {
			t.Fatalf("acquire %s after the failovers: %v", name, err)
		}
		go func() {
			_, err := svc.Acquire(context.Background(), name, locks.AcquireRequest{TTL: time.Minute, Wait: 30 * time.Second})
			granted <- result{name, err}
		}()
		eventuallyTrue(t, name+" has a waiter", func() bool {
			st, err := svc.Inspect(t.Context(), name, "")
			return err == nil && st.Waiters == 1
		})
		// A probe published to a primary while it was stopped reaches the
		// listener when that node resumes, late: one still pending would
		// take the place of the release's wake-up (a pending hint stays).
		for drained := false; !drained; {
			select {
			case <-hints[name]:
			default:
				drained = true
			}
		}
		if _, err := svc.Release(t.Context(), name, held.Token); err != nil {
			t.Fatalf("release %s: %v", name, err)
		}
	}
	for range hints {
		if r := <-granted; r.err != nil {
			t.Errorf("waiter on %s = %v, want it granted", r.name, r.err)
		}
	}
	wakeups := 0
	for _, h := range hints {
		for again := true; again; {
			select {
			case hint := <-h:
				if hint == locks.HintReleased {
					wakeups++
					again = false
				}
			default:
				again = false
			}
		}
	}
	if wakeups != len(hints) {
		t.Errorf("release wake-ups heard = %d, want %d, one per name", wakeups, len(hints))
	}
}

// replicaOf returns the address of primary's replica, or "" while it has
// none attached (or primary does not answer).
func replicaOf(ctx context.Context, primary *redis.Client) string {
	id, err := primary.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		return ""
	}
	replicas, err := primary.Do(ctx, "cluster", "replicas", id).StringSlice()
	if err != nil || len(replicas) == 0 {
		return ""
	}
	// A CLUSTER REPLICAS line is "<id> <ip:port@bus> ...".
	f := strings.Fields(replicas[0])
	if len(f) < 2 {
		return ""
	}
	addr, _, _ := strings.Cut(f[1], "@")
	return addr
}

// allowPartialCoverage lets every node of c serve its slots while others
// have no primary.
func allowPartialCoverage(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		node := redis.NewClient(&redis.Options{Addr: n.Addr})
		err := node.ConfigSet(t.Context(), "cluster-require-full-coverage", "no").Err()
		_ = node.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}
