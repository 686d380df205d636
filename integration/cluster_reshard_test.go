package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
)

// Slots holding locks, keep-alive leases and rate-limit counters move from
// one primary of a cluster of its own to another (redis-cli --cluster
// reshard: MIGRATE, MOVED and ASK) while two Latchkey instances serve load
// on them over HTTP: no request fails with 500, none with 503 but a lock
// call on a moving slot while it moves, every keep-alive lease stays held
// with its fence, fences strictly increase, and every rate-limit key
// allowed exactly min(requests, limit), which its counter in Redis shows
// too.
func TestClusterReshardUnderLoad(t *testing.T) {
	cl := ownCluster(t)
	const limit = 150
	a, b, nodes, prims := newClusterPair(t, cl,
		policy("flow", ratelimit.FixedWindow, 1_000_000, time.Hour), policy("exact", ratelimit.FixedWindow, limit, time.Hour))
	// redis-cli moves the source's lowest slots first: 400 of them, or as
	// many as reach a slot of each policy's counters, which on a cluster are
	// in 12 buckets' slots (docs/cluster-keys.md).
	src, dst := prims[0], prims[1]
	lo := src.Slots[0][0]
	slots := 400
	for _, p := range []string{"flow", "exact"} {
		slots = max(slots, firstSlotFrom(lo, a.limitKeyOf(t, p))-lo+1)
	}
	if src.Slots[0][1]-lo+1 < slots {
		t.Fatalf("source %s serves %v, want %d slots in its first range", src.Addr, src.Slots, slots)
	}
	moving := func(slot int) bool { return lo <= slot && slot < lo+slots }
	elsewhere := func(slot int) bool { return !moving(slot) }
	cycled := append(namesOnSlots(t, "cycle", 3, a.lockKey, moving), namesOnSlots(t, "cycle-other", 1, a.lockKey, elsewhere)...)
	kept := append(namesOnSlots(t, "kept", 3, a.lockKey, moving), namesOnSlots(t, "kept-other", 1, a.lockKey, elsewhere)...)
	checks := namesOnSlots(t, "user", 2, a.limitKeyOf(t, "flow"), moving)
	exactKeys := namesOnSlots(t, "quota", 3, a.limitKeyOf(t, "exact"), moving)

	l := newClusterLoad(t, a, b, cycled, kept, checks, "flow")
	l.run(t)
	// Each exact key is asked until the reshard is over and it was asked
	// more than its limit.
	resharded := make(chan struct{})
	counts := make([]exactCount, len(exactKeys))
	var ask sync.WaitGroup
	for i, key := range exactKeys {
		ask.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-resharded:
					if counts[i].sent > limit+20 {
						return
					}
				default:
				}
				r := l.envs[n%2].send(context.Background(), "POST", "/v1/ratelimit/check", `{"policy":"exact","key":"`+key+`"}`)
				counts[i].add(r)
			}
		})
	}
	l.waitRounds(t, 2, time.Minute)

	started := l.tick()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", "--cluster", "reshard", dst.Addr,
		"--cluster-from", src.ID, "--cluster-to", dst.ID, "--cluster-slots", strconv.Itoa(slots), "--cluster-yes").CombinedOutput()
	ended := l.tick()
	close(resharded)
	if err != nil {
		t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out)
	}
	t.Logf("moved slots %d-%d from %s to %s between %d and %d", lo, lo+slots-1, src.Addr, dst.Addr, started, ended)
	l.waitRounds(t, 3, time.Minute)
	ask.Wait()
	l.stop()

	for _, n := range topology(t, nodes) {
		if n.ID == dst.ID && !n.owns(lo) && !n.owns(lo+slots-1) {
			t.Fatalf("%s does not serve the moved slots: %v", dst.Addr, n.Slots)
		}
	}
	ops := l.recorded()
	wantAnswered(t, ops)
	wantFencesIncrease(t, ops)
	wantKeptHeld(t, l, ops, func(int) bool { return false })
	// A lock script names several keys of its slot: on a slot caught half
	// moved Redis answers TRYAGAIN, which may outlast the client's
	// redirects and be a 503, there and then only. A rate-limit decision
	// names one key and follows MOVED and ASK: it never gets a 503.
	during, unavailable := 0, 0
	for _, op := range ops {
		overlaps := op.Start < ended && op.End > started && moving(op.Slot)
		if op.Status == http.StatusServiceUnavailable {
			unavailable++
			if !overlaps || op.Kind == "check" {
				t.Errorf("%s %s (slot %d): 503 at %d-%d, the move at %d-%d: %s", op.Kind, op.Name, op.Slot, op.Start, op.End, started, ended, op.Body)
			}
		}
		if op.Start > started && op.End < ended && moving(op.Slot) {
			during++
		}
	}
	if during == 0 {
		t.Error("no request on the moving slots ran while they moved")
	}
	for i, key := range exactKeys {
		c := counts[i]
		if c.other != 0 {
			t.Errorf("%s: %d answers neither 200 nor 429 (%s)", key, c.other, c.last)
		}
		if want := min(c.sent, limit); c.allowed != want {
			t.Errorf("%s: %d of %d requests allowed, want %d", key, c.allowed, c.sent, want)
		}
		if n, err := a.RDB.Get(t.Context(), a.limitKeyOf(t, "exact")(key)).Int(); err != nil || n != c.allowed {
			t.Errorf("%s: counter %d (%v), want %d, one per allowed request", key, n, err, c.allowed)
		}
	}
	wantRenewedOn(t, l, func(int) bool { return false }, time.Minute)
	t.Logf("%d requests, %d on the moving slots while they moved, %d answered 503", len(ops), during, unavailable)
}

// exactCount tallies the answers to the checks of one rate-limit key.
type exactCount struct {
	sent, allowed, other int
	last                 string
}

func (c *exactCount) add(r response) {
	c.sent++
	var d struct {
		Allowed bool `json:"allowed"`
	}
	switch {
	case r.Err == nil && r.Status == http.StatusOK && json.Unmarshal(r.Body, &d) == nil && d.Allowed:
		c.allowed++
	case r.Err == nil && r.Status == http.StatusTooManyRequests:
	default:
		c.other++
		c.last = strconv.Itoa(r.Status) + " " + string(r.Body)
	}
}

// firstSlotFrom is the lowest slot at or above lo of the keys key makes of
// a thousand names: for a rate-limit policy's keys on a cluster, the first
// of its buckets' slots from lo.
func firstSlotFrom(lo int, key func(string) string) int {
	first := store.ClusterSlots
	for i := range 1000 {
		if slot := store.Slot(key("probe-" + strconv.Itoa(i))); slot >= lo && slot < first {
			first = slot
		}
	}
	return first
}
