package integration

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// A primary of a cluster of its own is SIGKILLed while two Latchkey
// instances serve load over HTTP on names of every primary: locks taken and
// released, keep-alive leases held, rate-limit decisions. Its replica is
// promoted by the cluster. No request fails with 500; a 503 comes only for
// a name on the killed primary's slots and only for a request sent before
// the promotion was seen (the order of the event clock, not a duration);
// keep-alive leases on the other primaries stay held with their fences
// throughout; fences on every name strictly increase; and waiters blocked
// across the failover get their locks when released after it.
func TestClusterFailoverUnderLoad(t *testing.T) {
	cl := newOwnCluster(t)
	a, b, nodes, prims := newClusterPair(t, cl, policy("flow", ratelimit.FixedWindow, 1_000_000, time.Hour))
	// The other primaries keep serving their slots while some are not
	// covered: without this every node answers CLUSTERDOWN until the
	// promotion (the README says so to operators).
	for addr, rdb := range nodes {
		if err := rdb.ConfigSet(t.Context(), "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatalf("%s: CONFIG SET: %v", addr, err)
		}
	}
	victim := prims[1]
	var replica clusterNode
	for _, n := range topology(t, nodes) {
		if n.MasterID == victim.ID {
			replica = n
		}
	}
	if replica.ID == "" {
		t.Fatalf("no replica of %s (%s)", victim.ID, victim.Addr)
	}
	failed := victim.owns
	lockKey, limitKey := a.lockKey, a.limitKeyOf(t, "flow")
	on := func(p clusterNode, stem string, n int, key func(string) string) []string {
		return namesOnSlots(t, stem+"-"+p.ID[:6], n, key, p.owns)
	}
	var cycled, kept, checks []string
	for _, p := range prims {
		cycled = append(cycled, on(p, "cycle", 2, lockKey)...)
		kept = append(kept, on(p, "kept", 2, lockKey)...)
		checks = append(checks, on(p, "user", 1, limitKey)...)
	}

	l := newClusterLoad(t, a, b, cycled, kept, checks, "flow")

	// Waiters through b, one on the victim's slots and one elsewhere,
	// blocked on locks a holds until after the failover.
	waitNames := append(on(victim, "waited", 1, lockKey), on(prims[0], "waited", 1, lockKey)...)
	held := map[string]string{}
	for _, name := range waitNames {
		held[name] = a.acquire(t, name, `{"ttl":"2m"}`).Token
	}
	waited := make(chan loadOp, 2*len(waitNames))
	wait := func(name string) {
		go func() {
			op := l.send(context.Background(), 1, "wait", name, store.Slot(lockKey(name)), "POST", "/v1/locks/"+name, `{"ttl":"10s","wait":"55s"}`)
			l.record(op)
			waited <- op
		}()
		eventually(t, time.Minute, name+" has a waiter", func() bool {
			r := b.send(t.Context(), "GET", "/v1/locks/"+name, "")
			return r.Status == http.StatusOK && decodeAs[stateJSON](t, r).Waiters == 1
		})
	}
	for _, name := range waitNames {
		wait(name)
	}
	l.run(t)
	l.waitRounds(t, 3, time.Minute)

	// Everything written so far is on the victim's replica: a write of ours
	// to the victim, then WAIT for one replica, covers every earlier one.
	victimRDB := nodes[victim.Addr]
	if err := victimRDB.Set(t.Context(), lockKey(waitNames[0])+":probe", "x", time.Minute).Err(); err != nil {
		t.Fatalf("write to the victim: %v", err)
	}
	if n, err := victimRDB.Do(t.Context(), "WAIT", 1, 10_000).Int(); err != nil || n < 1 {
		t.Fatalf("WAIT on the victim: %d replicas (%v), want 1", n, err)
	}
	pid := serverPID(t, victimRDB)
	killed := l.tick()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
	cl.forget(victim.Addr) // its pid may be another process's by the time the cluster stops
	t.Logf("killed primary %s (pid %d) at %d; its replica %s", victim.Addr, pid, killed, replica.Addr)

	// Promoted: every surviving node sees the replica as a primary serving
	// the victim's slots, and says the cluster is ok.
	var alive []string
	for addr := range nodes {
		if addr != victim.Addr {
			alive = append(alive, addr)
		}
	}
	eventually(t, time.Minute, "the replica is promoted and the cluster is ok on every node", func() bool {
		for _, addr := range alive {
			ns, err := readClusterNodes(t.Context(), nodes[addr])
			if err != nil {
				return false
			}
			i := slices.IndexFunc(ns, func(n clusterNode) bool { return n.ID == replica.ID })
			if i < 0 || !ns[i].is("master") || !ns[i].owns(victim.Slots[0][0]) {
				return false
			}
		}
		return clusterStateOK(t.Context(), nodes, alive)
	})
	promoted := l.tick()
	t.Logf("promotion seen at %d", promoted)
	l.waitRounds(t, 5, time.Minute)
	l.stop()

	// A waiter on the victim's slots may have been answered 503 during the
	// outage, as waiters are when their Redis does not answer (the checks
	// below say when it may); it waits again. Then every waiter gets its
	// lock once released.
	waiting := len(waitNames)
	for again := true; again; {
		select {
		case w := <-waited:
			if w.Status != http.StatusServiceUnavailable || !failed(w.Slot) {
				t.Fatalf("waiter on %s answered before the release: %d %s %v", w.Name, w.Status, w.Body, w.Err)
			}
			wait(w.Name)
		default:
			again = false
		}
	}
	// The held locks were replicated before the kill: their releases after
	// the promotion find them. A 503 is an error (and the release is tried
	// again, so that the waiter's part is tested all the same).
	for _, name := range waitNames {
		tries := 0
		eventually(t, time.Minute, "release "+name, func() bool {
			r := a.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", held[name])
			if tries++; r.Status != http.StatusOK && tries == 1 {
				t.Errorf("release %s (slot %d) after the promotion: %d %s", name, store.Slot(lockKey(name)), r.Status, r.Body)
			}
			return r.Status != http.StatusServiceUnavailable
		})
	}
	for range waiting {
		select {
		case w := <-waited:
			if w.Err != nil || w.Status != http.StatusCreated {
				t.Errorf("waiter on %s: %d %s %v, want 201 after the release", w.Name, w.Status, w.Body, w.Err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("a waiter is stranded: no answer within its wait")
		}
	}

	ops := l.recorded()
	wantAnswered(t, ops)
	wantFencesIncrease(t, ops)
	wantKeptHeld(t, l, ops, failed)
	unavailable := 0
	for _, op := range ops {
		if op.Status != http.StatusServiceUnavailable {
			continue
		}
		unavailable++
		switch {
		case !failed(op.Slot):
			t.Errorf("%s %s: 503 on slot %d, which the killed primary did not serve: %s", op.Kind, op.Name, op.Slot, op.Body)
		case op.End < killed:
			t.Errorf("%s %s: 503 answered before the kill: %s", op.Kind, op.Name, op.Body)
		case op.Start > promoted:
			t.Errorf("%s %s: 503 for a request sent after the promotion was seen (%d > %d): %s", op.Kind, op.Name, op.Start, promoted, op.Body)
		case op.Kind == "wait" && op.End > promoted:
			t.Errorf("wait %s: 503 answered after the promotion was seen (%d > %d): %s", op.Name, op.End, promoted, op.Body)
		}
	}
	t.Logf("%d requests, %d answered 503 (between the kill at %d and the promotion at %d)", len(ops), unavailable, killed, promoted)
	// Every kept lease on the surviving primaries is still renewed.
	wantRenewedOn(t, l, failed, time.Minute)
}

// serverPID is the process id of the Redis node rdb talks to (INFO server).
func serverPID(t testing.TB, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(t.Context(), "server").Result()
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("INFO server: process_id %q", v)
			}
			return pid
		}
	}
	t.Fatalf("INFO server has no process_id: %s", info)
	return 0
}
