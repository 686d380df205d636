package lua_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/scripts/lua"
	"github.com/redis/go-redis/v9"
)

// rwGeneral is the line of lib/rw.lua that opens it: what a read/write
// lock script runs after its fast path declined.
const rwGeneral = "-- lib/rw: the state of a read/write lock"

// rwVariants are a script with its fast path (as served), without it (its
// condition made false: every request takes the general code), and with
// the fast path alone (the general code replaced by a reply of
// "general").
func rwVariants(t *testing.T, name, fastIf string) (fast, general, only string) {
	t.Helper()
	fast = lua.Source(name)
	if strings.Count(fast, fastIf) != 1 || strings.Count(fast, rwGeneral) != 1 {
		t.Fatalf("%s: the fast path's condition %q or lib/rw.lua's first line is not there once", name, fastIf)
	}
	general = strings.Replace(fast, fastIf, "if false and "+strings.TrimPrefix(fastIf, "if "), 1)
	only = strings.Replace(fast, rwGeneral, "do return 'general' end\n"+rwGeneral, 1)
	return fast, general, only
}

// rwOp is one call of rw_acquire.lua or rw_release.lua on the lock's keys.
type rwOp struct {
	release  bool
	tok      string
	mode     string // "r", "w"; for a release also "" (either)
	ttl      int64  // ms
	fair     bool
	wait     int64 // waiter timeout, ms
	ka       bool
	owner    string
	clientTk bool  // the client sent the token (ARGV[14] "0")
	ret      int64 // fence retention, ms (0: 3600000, below 0: none)
}

var rwKeys = struct{ S, W, Q, R, L, C string }{"rw:lock:{n}", "rw:waiters:{n}", "rw:queue:{n}", "keepalive", "rw:lost:{n}", "rw:chan:{n}"}

func (o rwOp) run(t *testing.T, rdb *redis.Client, acquire, release string) any {
	t.Helper()
	ret := o.ret
	switch {
	case ret == 0:
		ret = 3600000
	case ret < 0:
		ret = 0
	}
	member := "rw/" + o.tok + ":n"
	var keys []string
	var args []any
	src := acquire
	if o.release {
		src = release
		keys = []string{rwKeys.S, rwKeys.C, rwKeys.R, rwKeys.L}
		args = []any{o.tok, o.mode, member, ret}
	} else {
		keys = []string{rwKeys.S, rwKeys.W, rwKeys.Q, rwKeys.R, rwKeys.L, rwKeys.C}
		args = []any{o.tok, o.ttl, ret, flag(o.fair), o.wait, flag(o.ka), 60000, 0, member, 86400000, "0", o.owner,
			o.mode, flag(!o.clientTk)}
	}
	res, err := rdb.Eval(t.Context(), src, keys, args...).Result()
	if err != nil && err != redis.Nil {
		t.Fatalf("%+v: %v", o, err)
	}
	return res
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// rwDump is everything of a read/write lock a script may change (but what
// it publishes): its state hash and TTL, waiters, queue, lost reasons and
// registry.
func rwDump(t *testing.T, m *miniredis.Miniredis, rdb *redis.Client, reply any) string {
	t.Helper()
	ctx := t.Context()
	var b strings.Builder
	fmt.Fprintf(&b, "reply %v\n", reply)
	fmt.Fprintf(&b, "state %v ttl %v\n", rdb.HGetAll(ctx, rwKeys.S).Val(), m.TTL(rwKeys.S))
	fmt.Fprintf(&b, "waiters %v ttl %v\n", rdb.ZRangeWithScores(ctx, rwKeys.W, 0, -1).Val(), m.TTL(rwKeys.W))
	fmt.Fprintf(&b, "queue %v ttl %v\n", rdb.LRange(ctx, rwKeys.Q, 0, -1).Val(), m.TTL(rwKeys.Q))
	fmt.Fprintf(&b, "lost %v\n", rdb.HGetAll(ctx, rwKeys.L).Val())
	fmt.Fprintf(&b, "registry %v\n", rdb.ZRangeWithScores(ctx, rwKeys.R, 0, -1).Val())
	return b.String()
}

// published are the messages sub received on the lock's channel so far:
// those before an end marker the test publishes after them.
func published(t *testing.T, rdb *redis.Client, sub *redis.PubSub) []string {
	t.Helper()
	if err := rdb.Publish(t.Context(), rwKeys.C, "(end)").Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		msg, err := sub.ReceiveMessage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if msg.Payload == "(end)" {
			return got
		}
		got = append(got, msg.Payload)
	}
}

// TestRWFastPathsChangeWhatTheGeneralCodeChanges: rw_acquire's
// straight-line read grant and rw_release's read release leave the lock's
// keys, reply and publish exactly as the general code after them does, and take
// only the requests they are for: a read grant never passes a queued
// writer, a lock of the other fairness, an expired reader, a writer or a
// re-entry, and a release of the writer or of an expired reader goes to
// the general code (which prunes first). Each case is built with the
// scripts as served, at a fixed clock, then its last call runs at a
// second on.
func TestRWFastPathsChangeWhatTheGeneralCodeChanges(t *testing.T) {
	acqFast, acqGeneral, acqOnly := rwVariants(t, "rw_acquire", "if mode == 'r' and ARGV[6] ~= '1' and not v[1]")
	relFast, relGeneral, relOnly := rwVariants(t, "rw_release", "if mode ~= 'w' and rv and not v[1]")
	const a, b, w = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB", "WWWWWWWWWWWWWWWWWWWWWW"
	read := func(tok string, ttl int64) rwOp { return rwOp{tok: tok, mode: "r", ttl: ttl} }
	cases := []struct {
		name  string
		setup []rwOp
		raw   func(*miniredis.Miniredis) // state written by hand after setup
		last  rwOp
		fast  bool // the last call takes the fast path
	}{
		{name: "read, free", last: read(a, 30000), fast: true},
		{name: "read, free, fair, owner, client's token", last: rwOp{tok: a, mode: "r", ttl: 30000, fair: true, owner: "job 7", clientTk: true},
			raw: func(m *miniredis.Miniredis) {
				m.HSet(rwKeys.L, a, "expired", "@"+a, "1:2:")
				m.ZAdd(rwKeys.R, 1, "rw/"+a+":n")
			}, fast: true},
		{name: "read, fence counter ahead of the clock", raw: func(m *miniredis.Miniredis) {
			m.HSet(rwKeys.S, "lf", "2795406400000000")
			m.SetTTL(rwKeys.S, time.Hour)
		}, last: read(a, 30000), fast: true},
		{name: "read, stale fairness flag", raw: func(m *miniredis.Miniredis) {
			m.HSet(rwKeys.S, "m", "1", "lf", "5")
			m.SetTTL(rwKeys.S, time.Minute)
		}, last: read(a, 30000), fast: true},
		{name: "read beside a longer reader", setup: []rwOp{read(b, 60000)}, last: read(a, 10000), fast: true},
		{name: "read beside a shorter reader", setup: []rwOp{read(b, 5000)}, last: read(a, 30000), fast: true},
		{name: "read beside a fair reader, fair", setup: []rwOp{{tok: b, mode: "r", ttl: 5000, fair: true}},
			last: rwOp{tok: a, mode: "r", ttl: 5000, fair: true}, fast: true},
		{name: "read beside a fair reader, plain", setup: []rwOp{{tok: b, mode: "r", ttl: 5000, fair: true}},
			last: read(a, 5000)},
		{name: "read behind a queued writer", setup: []rwOp{read(b, 60000), {tok: w, mode: "w", ttl: 5000, wait: 30000}},
			last: read(a, 5000)},
		{name: "read after a queued writer's deadline", setup: []rwOp{read(b, 60000), {tok: w, mode: "w", ttl: 5000, wait: 500}},
			last: read(a, 5000)},
		{name: "read beside an expired reader", setup: []rwOp{read(b, 500), read(w, 60000)}, last: read(a, 5000)},
		{name: "read re-entry", setup: []rwOp{read(a, 5000)}, last: read(a, 5000)},
		{name: "read behind a writer", setup: []rwOp{{tok: w, mode: "w", ttl: 5000}}, last: read(a, 5000)},
		{name: "read after an expired writer", setup: []rwOp{{tok: w, mode: "w", ttl: 500}}, last: read(a, 5000)},
		{name: "read, kept alive", last: rwOp{tok: a, mode: "r", ttl: 5000, ka: true}},
		{name: "write, free", last: rwOp{tok: a, mode: "w", ttl: 5000}},

		{name: "release one of two holds", setup: []rwOp{read(a, 5000), read(a, 5000)},
			last: rwOp{release: true, tok: a, mode: "r"}, fast: true},
		{name: "release one of two readers", setup: []rwOp{read(a, 5000), read(b, 60000)},
			last: rwOp{release: true, tok: a, mode: ""}, fast: true},
		{name: "release the last reader", setup: []rwOp{{tok: a, mode: "r", ttl: 5000, fair: true}},
			last: rwOp{release: true, tok: a, mode: "r"}, fast: true},
		{name: "release the last reader, no retention", setup: []rwOp{read(a, 5000)},
			last: rwOp{release: true, tok: a, mode: "", ret: -1}, fast: true},
		{name: "release the last reader, a writer waiting",
			setup: []rwOp{{tok: a, mode: "r", ttl: 5000, fair: true}, {tok: w, mode: "w", ttl: 5000, fair: true, wait: 30000}},
			last:  rwOp{release: true, tok: a, mode: "r", ret: 1000}, fast: true},
		{name: "release a kept-alive reader", setup: []rwOp{{tok: a, mode: "r", ttl: 5000, ka: true}},
			raw:  func(m *miniredis.Miniredis) { m.HSet(rwKeys.L, a, "heartbeat_missed", "@"+a, "1:2:") },
			last: rwOp{release: true, tok: a, mode: "r"}, fast: true},
		{name: "release an expired reader", setup: []rwOp{read(a, 500), read(b, 60000)},
			last: rwOp{release: true, tok: a, mode: "r"}},
		{name: "release a reader beside an expired one", setup: []rwOp{read(a, 60000), read(b, 500)},
			last: rwOp{release: true, tok: a, mode: "r"}},
		{name: "release the downgrading writer's read lease",
			setup: []rwOp{{tok: w, mode: "w", ttl: 5000}, read(w, 5000)}, last: rwOp{release: true, tok: w, mode: "r"}},
		{name: "release the writer", setup: []rwOp{{tok: w, mode: "w", ttl: 5000}}, last: rwOp{release: true, tok: w, mode: ""}},
		{name: "release a token holding nothing", setup: []rwOp{read(b, 5000)}, last: rwOp{release: true, tok: a, mode: "r"}},
	}
	t0 := time.Date(2026, 11, 23, 4, 0, 0, 0, time.UTC)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := func(acquire, release string) string {
				m := miniredis.RunT(t)
				m.SetTime(t0)
				rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
				t.Cleanup(func() { _ = rdb.Close() })
				for _, o := range c.setup {
					o.run(t, rdb, acqFast, relFast)
				}
				if c.raw != nil {
					c.raw(m)
				}
				m.SetTime(t0.Add(time.Second))
				m.FastForward(time.Second)
				sub := rdb.Subscribe(t.Context(), rwKeys.C)
				t.Cleanup(func() { _ = sub.Close() })
				if _, err := sub.Receive(t.Context()); err != nil {
					t.Fatal(err)
				}
				reply := c.last.run(t, rdb, acquire, release)
				return rwDump(t, m, rdb, reply) + "published " + strings.Join(published(t, rdb, sub), " ")
			}
			fast, general := run(acqFast, relFast), run(acqGeneral, relGeneral)
			if diff := cmp.Diff(general, fast); diff != "" {
				t.Errorf("the fast path's outcome differs from the general code's (-general +fast):\n%s", diff)
			}
			only := run(acqOnly, relOnly)
			if took := !strings.HasPrefix(only, "reply general\n"); took != c.fast {
				t.Errorf("the fast path took the call: %v, want %v", took, c.fast)
			}
		})
	}
}
