package integration

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// listPage is the answer to GET /v1/locks, /v1/rwlocks and /v1/semaphores.
type listPage struct {
	Items      []map[string]any `json:"items"`
	NextCursor *string          `json:"next_cursor"`
}

// list asks for one page of path with query q and returns it.
func (e *testEnv) list(t testing.TB, path string, q url.Values, headerPairs ...string) listPage {
	t.Helper()
	r := e.do(t, "GET", path+"?"+q.Encode(), "", headerPairs...)
	wantStatus(t, r, http.StatusOK)
	return decodeAs[listPage](t, r)
}

// listAll pages through path with q until the last page and returns the
// items listed, in order.
func (e *testEnv) listAll(t testing.TB, path string, q url.Values, headerPairs ...string) []map[string]any {
	t.Helper()
	q = maps.Clone(q)
	if q == nil {
		q = url.Values{}
	}
	var items []map[string]any
	for range 1000 {
		p := e.list(t, path, q, headerPairs...)
		items = append(items, p.Items...)
		if p.NextCursor == nil {
			return items
		}
		q.Set("cursor", *p.NextCursor)
	}
	t.Fatalf("%s: 1000 pages and no end", path)
	return nil
}

// namesOf returns the names of items, sorted.
func namesOf(items []map[string]any) []string {
	var names []string
	for _, it := range items {
		names = append(names, it["name"].(string))
	}
	slices.Sort(names)
	return names
}

// redisCalls sums INFO commandstats over every primary: what every client
// asked of Redis.
func redisCalls(t testing.TB, rdb redis.UniversalClient) map[string]int64 {
	t.Helper()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return commandCalls(t, rdb)
	}
	var mu sync.Mutex
	sum := map[string]int64{}
	err := cc.ForEachMaster(t.Context(), func(_ context.Context, c *redis.Client) error {
		calls := commandCalls(t, c)
		mu.Lock()
		defer mu.Unlock()
		for k, v := range calls {
			sum[k] += v
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// TestListPagesEveryHeldLockOnce: 10,000 held locks are each listed exactly
// once across pages of at most limit, and each page costs a bounded number
// of Redis calls (INFO commandstats on every primary): at most
// store.DefaultScanCalls SCANs, one inspect per item and one call for the
// listing secret, and on a cluster CLUSTER SLOTS once (and once more for
// each cluster client that reloads its view). Names outside the prefix
// and free locks are not listed.
func TestListPagesEveryHeldLockOnce(t *testing.T) {
	e := newTestEnv(t)
	const n, limit = 10000, 500
	ctx := t.Context()
	names := make(chan string, n)
	for i := range n {
		names <- fmt.Sprintf("job-%05d", i)
	}
	close(names)
	var wg sync.WaitGroup
	for range 64 { // concurrent acquires share pipelines: seconds, not minutes
		wg.Go(func() {
			for name := range names {
				if _, err := e.Svc.Acquire(ctx, name, locks.AcquireRequest{TTL: 10 * time.Minute, Owner: "w"}); err != nil {
					t.Errorf("acquire %s: %v", name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	e.acquire(t, "other", `{"ttl":"10m"}`)
	freed := e.acquire(t, "job-freed", `{"ttl":"10m"}`)
	e.release(t, "job-freed", freed.Token) // its fence key lingers, its lock key is gone

	seen := map[string]int{}
	q := url.Values{"prefix": {"job-"}, "limit": {fmt.Sprint(limit)}}
	pages := 0
	for {
		before := redisCalls(t, e.RDB)
		p := e.list(t, "/v1/locks", q)
		after := redisCalls(t, e.RDB)
		pages++
		delta := func(cmd string) int64 { return after[cmd] - before[cmd] }
		if len(p.Items) > limit {
			t.Fatalf("page %d: %d items, want at most %d", pages, len(p.Items), limit)
		}
		if s := delta("scan"); s > store.DefaultScanCalls {
			t.Errorf("page %d: %d SCAN calls, want at most %d", pages, s, store.DefaultScanCalls)
		}
		// Commands the scripts run count in INFO too: count the calls
		// clients make, the script calls.
		if scripts := delta("evalsha") + delta("eval"); scripts > limit+1 {
			t.Errorf("page %d: %d script calls, want at most %d (one inspect per item, the secret)", pages, scripts, limit+1)
		}
		// The listing's own, and a reload of each cluster client's view
		// (the server's, the test's).
		if slots := delta("cluster|slots"); slots > 3 {
			t.Errorf("page %d: %d CLUSTER SLOTS calls, want at most 3", pages, slots)
		}
		for _, it := range p.Items {
			seen[it["name"].(string)]++
			if it["owner"] != "w" || it["held"] != true {
				t.Errorf("item %v: want held, owner w", it)
			}
		}
		if p.NextCursor == nil {
			break
		}
		q.Set("cursor", *p.NextCursor)
		if pages > 10*n/limit {
			t.Fatalf("%d pages and no end", pages)
		}
	}
	if len(seen) != n {
		t.Errorf("%d names listed, want %d", len(seen), n)
	}
	for name, c := range seen {
		if c != 1 || !strings.HasPrefix(name, "job-0") {
			t.Errorf("%s listed %d times, want once, and only job-NNNNN names", name, c)
		}
	}
	t.Logf("%d pages of at most %d", pages, limit)
}

// TestListItemsAreWhatGetAnswers: every primitive's items are GET's object
// with its name: a lock's owner and keep-alive, a read/write lock's readers
// and writer, a semaphore's permits in use. An ended lease drops out even
// while its key lingers: a reader or holder whose expiry has passed in its
// sorted set, a lock whose key expired.
func TestListItemsAreWhatGetAnswers(t *testing.T) {
	e := newTestEnv(t)
	ctx := t.Context()
	e.acquire(t, "ka", `{"ttl":"10m","keepalive":true,"max_hold":"1h","owner":"svc-1"}`)
	e.acquire(t, "gone", `{"ttl":"10m"}`)
	e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"10m"}`)
	e.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"10m"}`)
	wantStatus(t, e.do(t, "POST", "/v1/rwlocks/prices", `{"mode":"write","ttl":"10m"}`), http.StatusCreated)
	stale := e.do(t, "POST", "/v1/rwlocks/stale", `{"mode":"read","ttl":"10m"}`)
	wantStatus(t, e.do(t, "POST", "/v1/semaphores/pool", `{"permits":4,"count":3,"ttl":"10m"}`), http.StatusCreated)
	semStale := e.do(t, "POST", "/v1/semaphores/pool-stale", `{"permits":2,"count":1,"ttl":"10m"}`)
	wantStatus(t, semStale, http.StatusCreated)

	// End three leases as time would, leaving their keys: the lock's key
	// expires; the reader's and the holder's expiry moves into the past.
	if err := e.RDB.PExpire(ctx, e.lockKey("gone"), time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the lock key of gone to expire", func() bool {
		n, _ := e.RDB.Exists(ctx, e.lockKey("gone")).Result()
		return n == 0
	})
	now, err := e.RDB.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	past := float64(now.UnixMilli() - 1000)
	expireReader(t, e, "stale", stale.Token(), now.UnixMilli()-1000)
	// a semaphore lease's expiry is the second field of its value
	leases := locks.SemaphoreKeysOf(e.Prefix, "pool-stale").Leases
	v, err := e.RDB.HGet(ctx, leases, semStale.Token()).Result()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.SplitN(v, ":", 3)
	if err := e.RDB.HSet(ctx, leases, semStale.Token(), f[0]+":"+strconv.FormatFloat(past, 'f', 0, 64)+":"+f[2]).Err(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{locks.RWKeysOf(e.Prefix, "stale").State, leases} {
		if n, _ := e.RDB.Exists(ctx, key).Result(); n != 1 {
			t.Fatalf("%s is gone, want it to linger", key)
		}
	}

	lk := e.listAll(t, "/v1/locks", nil)
	if len(lk) != 1 {
		t.Fatalf("locks: %v, want ka only", lk)
	}
	it := lk[0]
	ka, _ := it["keepalive"].(map[string]any)
	if it["name"] != "ka" || it["owner"] != "svc-1" || it["granted_at"] == nil || ka["max_hold_until"] == nil || it["ttl_ms"].(float64) <= 0 {
		t.Errorf("locks item %v: want ka with owner, granted_at, ttl_ms and keep-alive bounds", it)
	}
	if _, ok := it["token"]; ok {
		t.Errorf("locks item %v carries a token", it)
	}

	rw := e.listAll(t, "/v1/rwlocks", url.Values{"limit": {"10"}})
	got := map[string]map[string]any{}
	for _, it := range rw {
		got[it["name"].(string)] = it
	}
	if len(got) != 2 || got["catalog"]["readers"] != 2.0 || got["catalog"]["write_held"] != false ||
		got["prices"]["write_held"] != true || got["prices"]["readers"] != 0.0 {
		t.Errorf("rwlocks: %v, want catalog with 2 readers and prices write-held (stale's reader has ended)", rw)
	}

	sem := e.listAll(t, "/v1/semaphores", nil)
	if len(sem) != 1 {
		t.Fatalf("semaphores: %v, want pool only (pool-stale's holder has ended)", sem)
	}
	if it := sem[0]; it["name"] != "pool" || it["permits"] != 4.0 || it["in_use"] != 3.0 || it["holders"] != 1.0 {
		t.Errorf("semaphores item %v: want pool, 3 of 4 permits in use by 1 holder", it)
	}
}

// TestListTenantsAndCursors: a tenant lists its own names only, whatever
// names another tenant holds; a key limited to some names lists only
// those. A cursor is good for the listing that gave it only: another
// tenant's, kind's or prefix's cursor, an altered or made-up one, is a 400
// naming cursor and changes nothing in Redis; so are a bad limit and a bad
// prefix, each naming its field.
func TestListTenantsAndCursors(t *testing.T) {
	e := newTestEnv(t, withKeysFile(writeKeysFile(t, tenantsFile(""))))
	a, b := bearer(secretA), bearer(secretB)
	// Before any listing made the cursor secret, a made-up cursor is
	// refused and makes none.
	empty := e.dumps(t)
	wantProblem(t, e.do(t, "GET", "/v1/locks?cursor=AQAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "", a...), http.StatusBadRequest, "invalid-request")
	if !maps.Equal(empty, e.dumps(t)) {
		t.Errorf("a refused cursor changed Redis")
	}
	for i := range 5 {
		e.acquire(t, fmt.Sprintf("a-%d", i), `{"ttl":"10m"}`, a...)
		e.acquire(t, fmt.Sprintf("b-%d", i), `{"ttl":"10m"}`, b...)
	}
	e.acquire(t, "shared", `{"ttl":"10m"}`, bearer(secretOps)...)

	names := namesOf(e.listAll(t, "/v1/locks", url.Values{"limit": {"2"}}, a...))
	if strings.Join(names, ",") != "a-0,a-1,a-2,a-3,a-4" {
		t.Errorf("tenant a lists %v, want its own a-0..a-4", names)
	}
	names = namesOf(e.listAll(t, "/v1/locks", nil, b...))
	if strings.Join(names, ",") != "b-0,b-1,b-2,b-3,b-4" {
		t.Errorf("tenant b lists %v, want its own b-0..b-4", names)
	}
	names = namesOf(e.listAll(t, "/v1/locks", nil, bearer(secretOps)...))
	if strings.Join(names, ",") != "shared" {
		t.Errorf("the shared namespace lists %v, want shared only", names)
	}

	// A cursor of a's listing of locks with no prefix, mid-walk.
	first := e.list(t, "/v1/locks", url.Values{"limit": {"1"}}, a...)
	if first.NextCursor == nil {
		t.Fatalf("a's first page of one: %+v, want a next cursor", first)
	}
	cursor := *first.NextCursor
	wantStatus(t, e.do(t, "GET", "/v1/locks?limit=1&cursor="+cursor, "", a...), http.StatusOK)
	altered := []byte(cursor)
	altered[len(altered)/2] ^= 1
	if altered[len(altered)/2] == '-' || altered[len(altered)/2] == '_' {
		altered[len(altered)/2] = 'A'
	}
	before := e.dumps(t)
	for _, tt := range []struct {
		desc, path, field string
		hdr               []string
	}{
		{"another tenant's cursor", "/v1/locks?cursor=" + cursor, "cursor", b},
		{"another kind's cursor", "/v1/rwlocks?cursor=" + cursor, "cursor", a},
		{"another prefix's cursor", "/v1/locks?prefix=a-&cursor=" + cursor, "cursor", a},
		{"an altered cursor", "/v1/locks?cursor=" + string(altered), "cursor", a},
		{"a made-up cursor", "/v1/locks?cursor=AQAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "cursor", a},
		{"a cursor that is not base64", "/v1/locks?cursor=%21%21", "cursor", a},
		{"limit 0", "/v1/locks?limit=0", "limit", a},
		{"limit 1001", "/v1/locks?limit=1001", "limit", a},
		{"limit not a number", "/v1/locks?limit=many", "limit", a},
		{"prefix with a glob", "/v1/locks?prefix=a*", "prefix", a},
		{"prefix starting with a dash", "/v1/semaphores?prefix=-a", "prefix", a},
		{"prefix too long", "/v1/rwlocks?prefix=" + strings.Repeat("p", 129), "prefix", a},
		{"a held listing's cursor for the lost", "/v1/lost/locks?cursor=" + cursor, "cursor", a},
		{"lost limit 0", "/v1/lost/semaphores?limit=0", "limit", a},
		{"lost prefix with a glob", "/v1/lost/rwlocks?prefix=a*", "prefix", a},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			p := wantProblem(t, e.do(t, "GET", tt.path, "", tt.hdr...), http.StatusBadRequest, "invalid-request")
			if len(p.Errors) != 1 || p.Errors[0].Field != tt.field {
				t.Errorf("errors %+v, want one naming %s", p.Errors, tt.field)
			}
		})
	}
	if after := e.dumps(t); !maps.Equal(before, after) {
		t.Errorf("refused listings changed Redis")
	}
}

// TestGaugesCountEveryInstance: leases, waiters and keep-alive leases taken
// through two instances of one deployment are counted by the gauges of one
// of them, as Redis holds them (its sampler's walk), on every shard of a
// cluster.
func TestGaugesCountEveryInstance(t *testing.T) {
	e1 := newTestEnv(t)
	e2 := newTestEnv(t, beside(e1))
	// Instance 1: a lock with a waiter, a keep-alive lock, a read/write
	// lock with two readers.
	e1.acquire(t, "orders", `{"ttl":"10m"}`)
	go e2.send(t.Context(), "POST", "/v1/locks/orders", `{"ttl":"10m","wait":"1m"}`)
	e1.waitForWaiters(t, "orders", 1)
	e1.acquire(t, "ka-1", `{"ttl":"10m","keepalive":true,"max_hold":"1h"}`)
	e1.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"10m"}`)
	wantStatus(t, e2.do(t, "POST", "/v1/rwlocks/catalog", `{"mode":"read","ttl":"10m"}`), http.StatusCreated)
	// Instance 2: keep-alive locks on other names (other shards on a
	// cluster), a semaphore with two holders.
	for _, name := range []string{"ka-2", "ka-3", "ka-4"} {
		e2.acquire(t, name, `{"ttl":"10m","keepalive":true,"max_hold":"1h"}`)
	}
	wantStatus(t, e2.do(t, "POST", "/v1/semaphores/pool", `{"permits":4,"count":1,"ttl":"10m"}`), http.StatusCreated)
	wantStatus(t, e2.do(t, "POST", "/v1/semaphores/pool", `{"permits":4,"count":2,"ttl":"10m"}`), http.StatusCreated)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e1.Svc.RunSampler(ctx, 10*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
	// A walk that began after the leases were taken has ended once two
	// more walks than now have.
	start := metricValue(t, e1, "latchkey_sample_passes_total")
	eventually(t, 30*time.Second, "two complete walks", func() bool {
		return metricValue(t, e1, "latchkey_sample_passes_total") >= start+2
	})
	for series, want := range map[string]float64{
		`latchkey_leases_held{kind="lock"}`:      5, // orders, ka-1..ka-4
		`latchkey_leases_held{kind="rwlock"}`:    2,
		`latchkey_leases_held{kind="semaphore"}`: 2,
		`latchkey_waiters{kind="lock"}`:          1,
		`latchkey_waiters{kind="rwlock"}`:        0,
		`latchkey_waiters{kind="semaphore"}`:     0,
		`latchkey_keepalive_leases`:              4,
	} {
		if got := metricValue(t, e1, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}
