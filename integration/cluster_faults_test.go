package integration

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"
)

// Each primary of a cluster of its own is SIGKILLed in turn (the keep-alive
// directory's among them) and restarted, and then one is SIGSTOPped and
// resumed, while two Latchkey instances serve it over HTTP. After each
// fault, on every primary: a hold stream's `acquired` names a lease whose
// expires_at is still ahead of its primary's clock; a waiter is granted
// after a release by a wake-up (the holder's lease outlives the wait, so
// no re-check timer can grant it); keep-alive leases taken before the fault
// on the primaries that did not fail are still held with their fences, and
// renewed past the expiry they were granted with. No
// request is answered 500.
//
// The leases' TTLs leave room for what a fault costs by design: a renewal
// round that reaches a stopped primary waits one Redis timeout (2s here)
// before it renews the others, so a keep-alive lease needs a TTL above its
// renewal's lead (a third of it) plus that timeout, with room for a busy
// machine; a hold's first event is checked against its primary's clock
// after it arrived, so its TTL covers the delivery too.
func TestClusterHoldsWakeUpsAndKeepaliveAcrossFaults(t *testing.T) {
	const faultKeptTTL, holdTTL = 12 * time.Second, 8 * time.Second
	cl := ownCluster(t)
	a, b, nodes, _ := newClusterPair(t, cl)
	for addr, rdb := range nodes {
		if err := rdb.ConfigSet(t.Context(), "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatalf("%s: CONFIG SET: %v", addr, err)
		}
	}
	envs := [2]*testEnv{a, b}
	send := func(e *testEnv, method, path, body string, headerPairs ...string) response {
		t.Helper()
		r := e.send(t.Context(), method, path, body, headerPairs...)
		if r.Status == http.StatusInternalServerError {
			t.Errorf("%s %s: 500 %s", method, path, r.Body)
		}
		return r
	}
	names := func(p clusterNode, stem string, n int) []string {
		return namesOnSlots(t, fmt.Sprintf("%s-%s", stem, p.ID[:6]), n, a.lockKey, p.owns)
	}

	// keptOn takes a keep-alive lease on every primary, alternately through
	// a and b; kept checks each one's primary did not fail is still held.
	type kept struct {
		name, token string
		fence       int64
		expires     time.Time // as granted
		on          clusterNode
	}
	keptOn := func(round int, prims []clusterNode) []kept {
		var ks []kept
		for i, p := range prims {
			name := names(p, fmt.Sprintf("kept%d", round), 1)[0]
			l := envs[i%2].acquire(t, name, `{"ttl":"`+faultKeptTTL.String()+`","keepalive":true}`)
			ks = append(ks, kept{name, l.Token, l.Fence, l.ExpiresAt, p})
		}
		return ks
	}
	wantKept := func(ks []kept, failed string) {
		t.Helper()
		for _, k := range ks {
			if k.on.Addr == failed {
				continue
			}
			// Held with its fence, and renewed past its first expiry: the
			// renewer still serves it (with a TTL this long, a lease nobody
			// renews would still be held when first looked at).
			eventually(t, time.Minute, "keep-alive lease "+k.name+" renewed past its first expiry", func() bool {
				r := send(a, "GET", "/v1/locks/"+k.name, "", "Lock-Token", k.token)
				if r.Status != http.StatusOK {
					t.Errorf("kept %s: %d %s", k.name, r.Status, r.Body)
					return true
				}
				st := decodeAs[stateJSON](t, r)
				if !st.Held || st.Owned == nil || !*st.Owned || st.Fence != k.fence {
					t.Errorf("keep-alive lease %s on %s, which did not fail, lapsed: %+v (fence %d)", k.name, k.on.Addr, st, k.fence)
					return true
				}
				return st.ExpiresAt != nil && st.ExpiresAt.After(k.expires)
			})
		}
	}

	// serve checks holds and wake-ups on every primary.
	serve := func(round int, prims []clusterNode) {
		t.Helper()
		for i, p := range prims {
			e, other := envs[i%2], envs[(i+1)%2]
			hold, waited := names(p, fmt.Sprintf("hold%d", round), 2)[0], names(p, fmt.Sprintf("wait%d", round), 1)[0]
			h := e.openHold(t, hold, `{"ttl":"`+holdTTL.String()+`"}`)
			if h.Status != http.StatusOK {
				t.Errorf("hold %s on %s: %d %s", hold, p.Addr, h.Status, h.Body)
			} else {
				ev := h.next(t, time.Minute, false)
				clock, err := nodes[p.Addr].Time(t.Context()).Result()
				if err != nil {
					t.Fatalf("TIME on %s: %v", p.Addr, err)
				}
				now := clock.UnixMilli()
				exp, err := time.Parse(time.RFC3339Nano, fmt.Sprint(ev.Data["expires_at"]))
				switch {
				case ev.Name != "acquired" || err != nil:
					t.Errorf("hold %s: first event %s %v (%v), want acquired", hold, ev.Name, ev.Data, err)
				case exp.UnixMilli() <= now:
					t.Errorf("hold %s on %s: acquired a lease expiring at %s, already past on its primary (%s)", hold, p.Addr, exp, time.UnixMilli(now))
				}
				h.close()
			}

			token := e.acquire(t, waited, `{"ttl":"2m"}`).Token
			got := make(chan response, 1)
			go func() {
				got <- other.send(t.Context(), "POST", "/v1/locks/"+waited, `{"ttl":"10s","wait":"45s"}`)
			}()
			eventually(t, time.Minute, waited+" has a waiter", func() bool {
				r := send(e, "GET", "/v1/locks/"+waited, "")
				return r.Status == http.StatusOK && decodeAs[stateJSON](t, r).Waiters == 1
			})
			e.release(t, waited, token)
			if r := <-got; r.Status != http.StatusCreated {
				t.Errorf("waiter on %s (%s) after the release: %d %s, want 201 by a wake-up", waited, p.Addr, r.Status, r.Body)
			}
		}
	}

	current := func() []clusterNode {
		t.Helper()
		var prims []clusterNode
		eventually(t, time.Minute, "three primaries serving every slot, the cluster ok", func() bool {
			var addrs []string
			for addr := range nodes {
				addrs = append(addrs, addr)
			}
			ns, err := readClusterNodes(t.Context(), nodes[addrs[0]])
			if err != nil {
				return false
			}
			prims = primaries(ns)
			return len(prims) == 3 && clusterStateOK(t.Context(), nodes, addrs)
		})
		return prims
	}

	// Every primary of the start is killed in turn: the keep-alive
	// directory's (slot 2258) among them.
	prims := current()
	serve(0, prims)
	victims := slices.Clone(prims)
	for round, victim := range victims {
		ks := keptOn(round+1, current())
		cl.Kill(t, victim.Addr)
		t.Logf("round %d: killed primary %s", round+1, victim.Addr)
		eventually(t, time.Minute, "a replica serves "+victim.Addr+"'s slots", func() bool {
			for addr, c := range nodes {
				if addr == victim.Addr {
					continue
				}
				ns, err := readClusterNodes(t.Context(), c)
				if err != nil {
					return false
				}
				i := slices.IndexFunc(ns, func(n clusterNode) bool { return n.is("master") && !n.is("fail") && n.owns(victim.Slots[0][0]) })
				if i < 0 || ns[i].Addr == victim.Addr {
					return false
				}
			}
			return true
		})
		cl.Restart(t, victim.Addr)
		serve(round+1, current())
		wantKept(ks, victim.Addr)
	}

	prims = current()
	paused, others := prims[0], prims[1:]
	ks := keptOn(len(victims)+1, prims)
	cl.Pause(t, paused.Addr)
	t.Logf("paused primary %s", paused.Addr)
	serve(len(victims)+1, others)
	cl.Resume(t, paused.Addr)
	serve(len(victims)+2, current())
	wantKept(ks, paused.Addr)
}
