package locks_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

// TestSlotTagsCoverEverySlot: every hash slot has a tag of at most four
// letters and digits whose slot it is, so a registry shard can be put in
// the slot of any lock.
func TestSlotTagsCoverEverySlot(t *testing.T) {
	for slot := range store.ClusterSlots {
		tag := locks.SlotTag(slot)
		if got := store.Slot(tag); got != slot || len(tag) == 0 || len(tag) > 4 {
			t.Fatalf("SlotTag(%d) = %q, whose slot is %d", slot, tag, got)
		}
		for _, c := range []byte(tag) {
			if !store.IsAlnum(c) {
				t.Fatalf("SlotTag(%d) = %q holds %q", slot, tag, c)
			}
		}
	}
}

// TestRegistryKeyOf: on a single node every lease's registry is the one
// key; on a cluster it is the shard in the slot of the lock's own keys,
// whatever the primitive or tenant.
func TestRegistryKeyOf(t *testing.T) {
	const prefix = "lk:"
	if got := locks.RegistryKeyOf(prefix, false, "billing", "rw", "orders"); got != locks.RegistryKey(prefix) {
		t.Errorf("single node: %q, want %q", got, locks.RegistryKey(prefix))
	}
	for _, tc := range []struct{ tenant, tag, name string }{
		{"", "", "orders"}, {"", "rw", "orders"}, {"billing", "sem", "pool"}, {"", "", "a.b:c-d_e"},
	} {
		key := locks.RegistryKeyOf(prefix, true, tc.tenant, tc.tag, tc.name)
		lock := locks.KeysOfKind(store.TenantPrefix(prefix, tc.tenant), tc.tag, tc.name)[0]
		if store.Slot(key) != store.Slot(lock) {
			t.Errorf("%+v: shard %q is in slot %d, its lock %q in %d", tc, key, store.Slot(key), lock, store.Slot(lock))
		}
		if slot, ok := locks.ShardSlot(prefix, key); !ok || slot != store.Slot(lock) {
			t.Errorf("ShardSlot(%q) = %d, %v", key, slot, ok)
		}
	}
}

// TestShardPatternFindsShardsOnly: SCAN with the shard pattern lists the
// registry shards of the prefix, glob characters in the prefix and all, and
// no other key; ShardSlot refuses a key with a tag Latchkey does not write.
func TestShardPatternFindsShardsOnly(t *testing.T) {
	m, rdb := newTestRedis(t)
	const prefix = "l*k[1]?:"
	want := []string{locks.ShardKey(prefix, 0), locks.ShardKey(prefix, 777), locks.ShardKey(prefix, store.ClusterSlots-1)}
	due, gens := locks.DirKeys(prefix)
	others := []string{locks.RegistryKey(prefix), due, gens, "lxk11x:keepalive:{a}", locks.ShardKey("lk:", 5),
		prefix + "lock:{orders}"}
	for _, k := range slices.Concat(want, others) {
		m.Set(k, "x")
	}
	keys, _, err := rdb.Scan(t.Context(), 0, locks.ShardPattern(prefix), 10000).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("SCAN %q = %q, want %q", locks.ShardPattern(prefix), keys, want)
	}
	if _, ok := locks.ShardSlot(prefix, locks.RegistryKey(prefix)+":{notatag}"); ok {
		t.Errorf("ShardSlot accepts a tag that is not the slot's own")
	}
}

// TestDirectoryScripts walks the directory scripts through a grant, a
// claim, a visit that a grant overtakes, and an empty shard, on the Redis
// clock of miniredis.
func TestDirectoryScripts(t *testing.T) {
	m, rdb := newTestRedis(t)
	ctx := t.Context()
	due, gens := locks.DirKeys("lk:")
	keys := []string{due, gens}
	run := func(src string, args ...any) any {
		t.Helper()
		res, err := rdb.Eval(ctx, src, keys, args...).Result()
		if err != nil {
			t.Fatalf("%.20s: %v", src, err)
		}
		return res
	}
	score := func(slot int) (float64, bool) {
		s, err := rdb.ZScore(ctx, due, strconv.Itoa(slot)).Result()
		return s, err == nil
	}
	gen := func(slot int) string {
		g, _ := rdb.HGet(ctx, gens, strconv.Itoa(slot)).Result()
		return g
	}
	nowMS := t0.UnixMilli()
	usAt := func(d time.Duration) string { return strconv.FormatInt(t0.Add(d).UnixMicro(), 10) }

	// A grant marks slot 5 due in 1000ms, then one in 400ms moves it
	// earlier, one in 2000ms does not; each gives it a new generation (the
	// clock, or one above the last in the same microsecond).
	for _, in := range []int{1000, 400, 2000} {
		run(lua.Source("keepalive_mark"), "lt", 5, in)
	}
	if s, _ := score(5); s != float64(nowMS+400) {
		t.Fatalf("slot 5 due at %v, want now+400", s)
	}
	if g, want := gen(5), strconv.FormatInt(t0.UnixMicro()+2, 10); g != want {
		t.Fatalf("slot 5's generation after 3 marks = %q, want %q", g, want)
	}
	// Reconciliation adds a missing slot due at once, and leaves a listed one.
	if n := run(lua.Source("keepalive_mark"), "nx", 5, 0, 9, 0); n != int64(1) {
		t.Fatalf("nx mark changed %v slots, want 1 (slot 9)", n)
	}
	if s, _ := score(5); s != float64(nowMS+400) {
		t.Fatalf("nx moved slot 5 to %v", s)
	}

	// Only slot 9 is due: the claim takes it, due again after the claim
	// time, with its generation, and says when slot 5 falls due.
	c := run(lua.Source("keepalive_claim"), 10, 1000).([]any)
	if want := []any{nowMS, nowMS + 400, int64(9), usAt(0)}; !slices.Equal(c, want) {
		t.Fatalf("claim = %v, want %v", c, want)
	}
	if s, _ := score(9); s != float64(nowMS+1000) {
		t.Fatalf("claimed slot 9 due at %v, want now+claim time", s)
	}

	// Slot 9's shard was empty and nothing marked it since: it leaves,
	// with its generation.
	if n := run(lua.Source("keepalive_settle"), 9, usAt(0), -1); n != int64(1) {
		t.Fatalf("settle removed %v slots, want 1", n)
	}
	if _, ok := score(9); ok || gen(9) != "" {
		t.Fatalf("slot 9 still listed, or its generation %q kept", gen(9))
	}

	m.SetTime(t0.Add(500 * time.Millisecond))
	nowMS += 500
	c = run(lua.Source("keepalive_claim"), 10, 1000).([]any)
	if want := []any{nowMS, nowMS + 1000, int64(5), strconv.FormatInt(t0.UnixMicro()+2, 10)}; !slices.Equal(c, want) {
		t.Fatalf("claim = %v, want %v", c, want)
	}
	// A grant marks slot 5 while the renewer visits it: the renewer saw
	// the shard empty, but the slot stays, due when the grant said.
	run(lua.Source("keepalive_mark"), "lt", 5, 300)
	claimedGen := c[3]
	run(lua.Source("keepalive_settle"), 5, claimedGen, -1)
	if s, ok := score(5); !ok || s != float64(nowMS+300) {
		t.Fatalf("slot 5 after an overtaken settle: %v %v, want due at now+300", s, ok)
	}
	// A settle with the generation current sets the shard's next due time,
	// later or earlier.
	c = run(lua.Source("keepalive_claim"), 10, 1000).([]any)
	if len(c) != 2 {
		t.Fatalf("claim before anything is due = %v", c)
	}
	run(lua.Source("keepalive_settle"), 5, gen(5), nowMS+5000)
	if s, _ := score(5); s != float64(nowMS+5000) {
		t.Fatalf("slot 5 due at %v, want now+5000", s)
	}
	// An overtaken settle never moves a slot later.
	run(lua.Source("keepalive_settle"), 5, claimedGen, nowMS+9000)
	if s, _ := score(5); s != float64(nowMS+5000) {
		t.Fatalf("an overtaken settle moved slot 5 to %v", s)
	}

	// A slot that left the directory and is marked again gets a generation
	// that no older claim holds, so an overtaken settle of that claim does
	// not take it out.
	run(lua.Source("keepalive_mark"), "lt", 9, 100)
	if g := gen(9); g == usAt(0) || g == "" {
		t.Fatalf("slot 9 marked again has generation %q, want a new one", g)
	}
	run(lua.Source("keepalive_settle"), 9, usAt(0), -1)
	if _, ok := score(9); !ok {
		t.Fatalf("a settle of an older claim removed slot 9, marked again since")
	}
	// Once every shard is empty and settled, the directory's keys are gone.
	run(lua.Source("keepalive_settle"), 9, gen(9), -1, 5, gen(5), -1)
	if n, err := rdb.Exists(ctx, due, gens).Result(); err != nil || n != 0 {
		t.Fatalf("directory keys left after every shard emptied: %v %v", n, err)
	}
}

// TestClusterRenewerVisitsDueShards: on a store in cluster mode (miniredis
// does not check slots), a keep-alive grant marks its shard's slot, the
// renewer visits that shard only once it is due, renews the lease in its
// shard and settles the slot at the shard's next due time; once the lease
// is released the renewer drops the slot.
func TestClusterRenewerVisitsDueShards(t *testing.T) {
	m, rdb := newTestRedis(t)
	ctx := t.Context()
	const prefix = "lk:"
	svc := mustNew(t, rdb, locks.Config{}, store.Config{KeyPrefix: prefix, Cluster: true})
	due, _ := locks.DirKeys(prefix)
	now := t0
	l := mustAcquire(t, svc, "orders", locks.AcquireRequest{TTL: 3 * time.Second, Keepalive: true})
	shard := locks.RegistryKeyOf(prefix, true, "", "", "orders")
	slot := strconv.Itoa(store.Slot("orders"))
	member := locks.RegistryMember("", l.Token, "orders")
	if n, _ := m.ZMembers(locks.RegistryKey(prefix)); len(n) != 0 {
		t.Fatalf("the single-node registry holds %v on a cluster", n)
	}
	if s, err := m.ZScore(shard, member); err != nil || s != float64(t0.Add(time.Second).UnixMilli()) {
		t.Fatalf("shard entry: %v %v, want due at t0+1s", s, err)
	}
	waitFor(t, "the grant's mark reaches the directory", func() bool {
		s, err := rdb.ZScore(ctx, due, slot).Result()
		return err == nil && s <= float64(t0.Add(time.Second).UnixMilli())
	})

	// Not due yet: the renewer visits nothing.
	locks.RenewShardsNow(ctx, svc)
	if s, _ := m.ZScore(shard, member); s != float64(t0.Add(time.Second).UnixMilli()) {
		t.Fatalf("the renewer renewed a lease before it was due")
	}

	advance(m, &now, 1100*time.Millisecond)
	locks.RenewShardsNow(ctx, svc)
	next := now.Add(time.Second).UnixMilli()
	if s, _ := m.ZScore(shard, member); s != float64(next) {
		t.Fatalf("after the visit the entry is due at %v, want %v (renewed)", s, next)
	}
	if ttl := m.TTL(locks.KeysOf(prefix, "orders").Lock); ttl != 3*time.Second {
		t.Fatalf("lock TTL after renewal = %s, want 3s", ttl)
	}
	if s, err := rdb.ZScore(ctx, due, slot).Result(); err != nil || s != float64(next) {
		t.Fatalf("directory: slot due at %v (%v), want the shard's next due %v", s, err, next)
	}

	// Released: the shard empties, and the next visit drops the slot.
	if _, err := svc.Release(ctx, "orders", l.Token); err != nil {
		t.Fatal(err)
	}
	if n, _ := m.ZMembers(shard); len(n) != 0 {
		t.Fatalf("the shard holds %v after the release", n)
	}
	advance(m, &now, 1100*time.Millisecond)
	locks.RenewShardsNow(ctx, svc)
	if n, err := rdb.ZCard(ctx, due).Result(); err != nil || n != 0 {
		t.Fatalf("directory after the last lease left: %d slots (%v), want none", n, err)
	}
}
