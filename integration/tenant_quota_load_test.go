package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// leaseSpan is one lease as its client knew it: from the answer that
// granted it to the release that ended it, on the test's one monotonic
// clock.
type leaseSpan struct{ from, to time.Duration }

// mostAtOnce is the largest number of spans that overlap at one instant,
// and that instant. A span that ends when another begins does not overlap
// it.
func mostAtOnce(spans []leaseSpan) (int, time.Duration) {
	type edge struct {
		at    time.Duration
		delta int
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		edges = append(edges, edge{s.from, +1}, edge{s.to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return a.delta - b.delta // ends first
	})
	n, most, when := 0, 0, time.Duration(0)
	for _, e := range edges {
		if n += e.delta; n > most {
			most, when = n, e.at
		}
	}
	return most, when
}

// quotaClient is one client of a tenant in TestTenantNeverHoldsMoreThanItsQuota.
type quotaClient struct {
	e       *testEnv
	t       *testing.T
	key     []string
	rng     *rand.Rand
	base    time.Time
	spans   []leaseSpan
	answers map[string]int // "status type" -> count
}

func (c *quotaClient) now() time.Duration { return time.Since(c.base) }

// pause holds a lease (or waits between requests) for up to 10ms.
func (c *quotaClient) pause() { time.Sleep(time.Duration(c.rng.IntN(10_000)) * time.Microsecond) }

// answer counts r's status and problem type; it reports whether r granted
// a lease.
func (c *quotaClient) answer(what string, r response) bool {
	switch r.Status {
	case http.StatusOK, http.StatusCreated:
		c.answers[fmt.Sprint(r.Status)]++
		return true
	case http.StatusConflict, http.StatusTooManyRequests:
		var p problemJSON
		_ = json.Unmarshal(r.Body, &p)
		c.answers[fmt.Sprint(r.Status, " ", p.Type)]++
	default:
		c.t.Errorf("%s: %d %s (%v)", what, r.Status, r.Body, r.Err)
	}
	return false
}

// release sends the release of a lease granted at from.
func (c *quotaClient) release(path, token string, from time.Duration) {
	c.spans = append(c.spans, leaseSpan{from, c.now()})
	r := c.e.send(c.t.Context(), "DELETE", path, "", append(c.key, "Lock-Token", token)...)
	if r.Status != http.StatusOK {
		c.t.Errorf("release %s: %d %s (%v)", path, r.Status, r.Body, r.Err)
	}
}

// round takes one lease of a kind chosen at random on name, holds it a
// moment and releases it.
func (c *quotaClient) round(name string) {
	path, body := "/v1/locks/"+name, `{"ttl":"30s"}`
	switch c.rng.IntN(8) {
	case 1:
		body = `{"ttl":"30s","wait":"300ms"}`
	case 2:
		body = `{"ttl":"30s","keepalive":true,"max_hold":"1m"}`
	case 3: // a re-entry: one lease, two holds
		r := c.e.send(c.t.Context(), "POST", path, body, c.key...)
		if !c.answer("lock", r) {
			return
		}
		from := c.now()
		reentered := c.answer("re-entry", c.e.send(c.t.Context(), "POST", path, body, append(c.key, "Lock-Token", r.Token())...))
		c.pause()
		if reentered {
			if d := c.e.send(c.t.Context(), "DELETE", path, "", append(c.key, "Lock-Token", r.Token())...); d.Status != http.StatusOK {
				c.t.Errorf("release of the re-entry: %d %s", d.Status, d.Body)
			}
		}
		c.release(path, r.Token(), from)
		return
	case 4:
		path, body = "/v1/rwlocks/"+name, `{"mode":"read","ttl":"30s","wait":"300ms"}`
	case 5:
		path, body = "/v1/rwlocks/"+name, `{"mode":"write","ttl":"30s","wait":"300ms"}`
	case 6:
		path, body = "/v1/semaphores/"+name, `{"permits":2,"ttl":"30s","wait":"300ms"}`
	case 7: // a hold: the lease ends when the client goes away
		h := c.e.openHoldAt(c.t, path+"/hold", `{"ttl":"30s","wait":"300ms"}`, c.key...)
		if !c.answer("hold", response{Status: h.Status, Header: h.Header, Body: []byte(h.Body)}) {
			return
		}
		from := c.now()
		c.pause()
		c.spans = append(c.spans, leaseSpan{from, c.now()})
		h.close()
		return
	}
	r := c.e.send(c.t.Context(), "POST", path, body, c.key...)
	if !c.answer(path, r) {
		return
	}
	from := c.now()
	c.pause()
	c.release(path, r.Token(), from)
}

// TestTenantNeverHoldsMoreThanItsQuota: clients of two tenants with a
// lease quota of 3 take locks (waiting or not, kept alive, re-entered),
// read and write leases, permits and holds on the same few names at once.
// At no instant, from the answer that granted a lease to the release that
// ended it, does a tenant hold more than 3 leases.
func TestTenantNeverHoldsMoreThanItsQuota(t *testing.T) {
	const quota, clients, rounds = 3, 6, 40
	keys := "defaults:\n  quotas: {leases: 3}\n" + tenantsFile("leases: 3")
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, keys)), withRenewer(0))
	base := time.Now()
	names := []string{"n0", "n1", "n2"}
	byTenant := map[string][]*quotaClient{}
	var wg sync.WaitGroup
	for _, tenant := range []string{"a", "b"} {
		secret := map[string]string{"a": secretA, "b": secretB}[tenant]
		for i := range clients {
			c := &quotaClient{e: e, t: t, key: bearer(secret), base: base, answers: map[string]int{},
				rng: rand.New(rand.NewPCG(uint64(i), uint64(len(tenant)+len(byTenant))))}
			byTenant[tenant] = append(byTenant[tenant], c)
			wg.Go(func() {
				for range rounds {
					c.round(names[c.rng.IntN(len(names))])
					c.pause()
				}
			})
		}
	}
	wg.Wait()
	for tenant, cs := range byTenant {
		var spans []leaseSpan
		answers := map[string]int{}
		for _, c := range cs {
			spans = append(spans, c.spans...)
			for k, n := range c.answers {
				answers[k] += n
			}
		}
		most, when := mostAtOnce(spans)
		t.Logf("tenant %s: %d leases, at most %d at once; answers %v", tenant, len(spans), most, answers)
		if most > quota {
			t.Errorf("tenant %s held %d leases at once at %s, quota %d", tenant, most, when, quota)
		}
		if answers["429 quota-exceeded"] == 0 || len(spans) == 0 {
			t.Errorf("tenant %s: %d leases and no quota-exceeded answer: the run never reached the quota", tenant, len(spans))
		}
	}
}
