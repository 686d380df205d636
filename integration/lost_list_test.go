package integration

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
)

// lostItemJSON is the LostState schema of api/openapi.yaml.
type lostItemJSON struct {
	Name   string `json:"name"`
	Leases []struct {
		Reason string    `json:"reason"`
		LostAt time.Time `json:"lost_at"`
		Fence  int64     `json:"fence"`
		Owner  string    `json:"owner"`
	} `json:"leases"`
	LeasesTruncated bool `json:"leases_truncated"`
}

// lostOf returns the lost leases path (/v1/lost/...) lists, by name, and
// fails when a page carries one of tokens.
func (e *testEnv) lostOf(t testing.TB, path string, q url.Values, tokens ...string) map[string]lostItemJSON {
	t.Helper()
	out := map[string]lostItemJSON{}
	for range 100 {
		r := e.do(t, "GET", path+"?"+q.Encode(), "")
		wantStatus(t, r, http.StatusOK)
		for _, tok := range tokens {
			if strings.Contains(string(r.Body), tok) {
				t.Fatalf("GET %s carries a token: %s", path, r.Body)
			}
		}
		page := decodeAs[struct {
			Items      []lostItemJSON `json:"items"`
			NextCursor *string        `json:"next_cursor"`
		}](t, r)
		for _, it := range page.Items {
			out[it.Name] = it
		}
		if page.NextCursor == nil {
			return out
		}
		q = url.Values{"cursor": {*page.NextCursor}, "prefix": {q.Get("prefix")}}
	}
	t.Fatalf("%s: 100 pages and no end", path)
	return nil
}

// TestLostLeasesAreListedWithWhyAndWho: force-releases of every primitive
// and a keep-alive lease run to its max_hold are listed under their kind
// with the reason, the lease's fence and owner and when they ended; one
// entry per lease a semaphore lost; a released lease is not listed, nor a
// lease still held; the prefix narrows the listing; no answer carries a
// token.
func TestLostLeasesAreListedWithWhyAndWho(t *testing.T) {
	e := newTestEnv(t)
	var tokens []string

	forced := e.acquire(t, "orders-42", `{"ttl":"1m","owner":"worker-7"}`)
	tokens = append(tokens, forced.Token)
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/orders-42?force=true", "", bearer(testAdminKey)...), http.StatusNoContent)

	released := e.acquire(t, "orders-43", `{"ttl":"1m","keepalive":true,"owner":"worker-8"}`)
	tokens = append(tokens, released.Token)
	e.release(t, "orders-43", released.Token)
	tokens = append(tokens, e.acquire(t, "orders-44", `{"ttl":"1m"}`).Token)

	// A keep-alive lease re-entered once its TTL runs: the re-entry's TTL
	// is cut to the max-hold deadline, which records the loss for then.
	nightly := locks.NewToken()
	tokens = append(tokens, nightly)
	wantStatus(t, e.do(t, "POST", "/v1/locks/nightly", `{"ttl":"1s","keepalive":true,"max_hold":"1s","owner":"cron"}`,
		"Lock-Token", nightly), http.StatusCreated)
	nightlyFence := e.inspect(t, "nightly").Fence
	eventually(t, 5*time.Second, "nightly's TTL to run", func() bool {
		pttl, err := e.RDB.PTTL(t.Context(), e.lockKey("nightly")).Result()
		return err == nil && pttl < time.Second
	})
	wantStatus(t, e.do(t, "POST", "/v1/locks/nightly", `{"ttl":"1s"}`, "Lock-Token", nightly), http.StatusOK)

	r := e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"1m","owner":"indexer-1"}`)
	wantStatus(t, r, http.StatusCreated)
	reader := r.JSON(t)
	readerFence := int64(reader["fence"].(float64))
	tokens = append(tokens, reader["token"].(string))
	wantStatus(t, e.do(t, "DELETE", "/v1/rwlocks/catalog?force=true", "", bearer(testAdminKey)...), http.StatusNoContent)
	for _, owner := range []string{"render-1", "render-2"} {
		tokens = append(tokens, e.semAcquire(t, "pdf-workers", fmt.Sprintf(`{"permits":3,"ttl":"1m","owner":%q}`, owner)).Token)
	}
	wantStatus(t, e.do(t, "DELETE", "/v1/semaphores/pdf-workers?force=true", "", bearer(testAdminKey)...), http.StatusNoContent)

	var lost map[string]lostItemJSON
	eventually(t, 10*time.Second, "nightly listed as lost to max_hold", func() bool {
		lost = e.lostOf(t, "/v1/lost/locks", url.Values{}, tokens...)
		_, ok := lost["nightly"]
		return ok
	})
	if names := slices.Sorted(maps.Keys(lost)); !slices.Equal(names, []string{"nightly", "orders-42"}) {
		t.Fatalf("lost locks %v, want nightly and orders-42 (a released lease and a held one are not lost)", names)
	}
	for _, tt := range []struct {
		item          lostItemJSON
		reason, owner string
		fence         int64
	}{
		{lost["orders-42"], locks.LostForceReleased, "worker-7", forced.Fence},
		{lost["nightly"], locks.LostMaxHold, "cron", nightlyFence},
	} {
		if len(tt.item.Leases) != 1 || tt.item.LeasesTruncated {
			t.Fatalf("%s: %+v, want one lost lease", tt.item.Name, tt.item)
		}
		l := tt.item.Leases[0]
		if l.Reason != tt.reason || l.Owner != tt.owner || l.Fence != tt.fence || l.LostAt.IsZero() || l.LostAt.After(time.Now().Add(time.Minute)) {
			t.Errorf("%s lost %+v, want %s by %s with fence %d", tt.item.Name, l, tt.reason, tt.owner, tt.fence)
		}
	}
	if !lost["nightly"].Leases[0].LostAt.Before(time.Now().Add(time.Second)) {
		t.Errorf("nightly listed as lost at %v, which has not come", lost["nightly"].Leases[0].LostAt)
	}
	if got := e.lostOf(t, "/v1/lost/locks", url.Values{"prefix": {"order"}, "limit": {"1"}}, tokens...); len(got) != 1 || got["orders-42"].Name == "" {
		t.Errorf("lost locks with prefix order: %v, want orders-42 only", slices.Collect(maps.Keys(got)))
	}

	rw := e.lostOf(t, "/v1/lost/rwlocks", url.Values{}, tokens...)
	if it := rw["catalog"]; len(rw) != 1 || len(it.Leases) != 1 || it.Leases[0].Owner != "indexer-1" ||
		it.Leases[0].Fence != readerFence || it.Leases[0].Reason != locks.LostForceReleased {
		t.Errorf("lost read/write locks %+v, want catalog's reader force-released", rw)
	}
	sem := e.lostOf(t, "/v1/lost/semaphores", url.Values{}, tokens...)
	var owners []string
	for _, l := range sem["pdf-workers"].Leases {
		owners = append(owners, l.Owner)
		if l.Reason != locks.LostForceReleased || l.Fence == 0 {
			t.Errorf("pdf-workers lost %+v, want force_released with its fence", l)
		}
	}
	if slices.Sort(owners); len(sem) != 1 || !slices.Equal(owners, []string{"render-1", "render-2"}) {
		t.Errorf("lost semaphores %+v, want pdf-workers' two leases", sem)
	}
}
