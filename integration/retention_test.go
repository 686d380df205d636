package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/redis/go-redis/v9"
)

// withRetention makes every key of a lock name short-lived: leases of up to
// the retention, and a fence retention r (lost-lease reasons follow it).
func withRetention(r time.Duration) envOption {
	return withServiceConfig(func(sc *serviceConfig) {
		sc.FenceTTL, sc.MaxTTL, sc.MaxHoldCap, sc.DefaultMaxHold = r, r, r, r
		sc.DefaultTTL = time.Second
		sc.RenewPoll = 20 * time.Millisecond
	})
}

// nameKeys are the per-name keys of a lock that hold state (the wake-up
// channel is no key).
func (e *testEnv) nameKeys(name string) []string {
	k := e.lockKeys(name)
	return []string{k.Lock, k.Fence, k.Waiters, k.Queue, k.Lost}
}

// Two hundred one-off lock names, used every way a name can be (released,
// left to expire, fair with a waiter that gave up, force-released, kept
// alive until max_hold), leave nothing in Redis once their leases and the
// fence retention have passed on Redis's clock. Right after each use every
// key the name has has a TTL of at most the longest lease and the retention,
// and its fence counter is there unless the retention has already passed
// since its grant.
func TestOneOffNamesExpire(t *testing.T) {
	const retention = 2 * time.Second
	e := newTestEnv(t, withRetention(retention))
	startRenewer(t, e.Svc)
	admin := []string{"Authorization", "Bearer " + testAdminKey}
	uses := []struct {
		kind string
		use  func(t *testing.T, name string) leaseJSON
	}{
		{"released", func(t *testing.T, name string) leaseJSON {
			l := e.acquire(t, name, `{"ttl":"1s"}`)
			wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", l.Token), http.StatusOK)
			return l
		}},
		{"expiring", func(t *testing.T, name string) leaseJSON { return e.acquire(t, name, `{"ttl":"1s"}`) }},
		{"fair", func(t *testing.T, name string) leaseJSON {
			l := e.acquire(t, name, `{"ttl":"1s","fair":true}`)
			wantStatus(t, e.do(t, "POST", "/v1/locks/"+name, `{"fair":true,"wait":"10ms"}`), http.StatusConflict)
			return l
		}},
		{"forced", func(t *testing.T, name string) leaseJSON {
			l := e.acquire(t, name, `{"ttl":"2s"}`)
			wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name+"?force=true", "", admin...), http.StatusNoContent)
			return l
		}},
		{"keepalive", func(t *testing.T, name string) leaseJSON {
			r := e.do(t, "POST", "/v1/locks/"+name, `{"ttl":"1s","keepalive":true,"max_hold":"1s"}`)
			wantStatus(t, r, http.StatusCreated)
			return leaseJSON{Fence: int64(r.JSON(t)["fence"].(float64))}
		}},
	}
	const names = 200
	for i := range names {
		u := uses[i%len(uses)]
		name := fmt.Sprintf("one-off-%s-%03d", u.kind, i)
		l := u.use(t, name)
		wantTTLs(t, e, name, l.Fence, retention)
	}

	// Poll until Redis has expired them all: no blind sleep, and a cap far
	// above the retention for a loaded machine.
	start := redisMicros(t, e.RDB)
	var left []string
	defer func() {
		if t.Failed() {
			t.Logf("keys left: %q", left)
		}
	}()
	eventually(t, 60*time.Second, "every key of the one-off names to expire", func() bool {
		left = e.keys(t)
		return len(left) == 0
	})
	t.Logf("%d one-off names: no key left %s after the last use, by Redis's clock (retention %s)",
		names, time.Duration(redisMicros(t, e.RDB)-start)*time.Microsecond, retention)
}

// wantTTLs checks, right after a use of name, that none of its keys lives
// for ever or past the longest lease (withRetention: the retention) and the
// retention after it, and that its fence counter is there (gone only if the
// retention has passed since the grant, on Redis's clock).
func wantTTLs(t *testing.T, e *testEnv, name string, fence int64, retention time.Duration) {
	t.Helper()
	pipe := e.RDB.Pipeline()
	timeCmd := pipe.Time(t.Context())
	keys := e.nameKeys(name)
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		ttls[i] = pipe.PTTL(t.Context(), k)
	}
	if _, err := pipe.Exec(t.Context()); err != nil {
		t.Fatalf("PTTL of %s's keys: %v", name, err)
	}
	now := timeCmd.Val().UnixMicro()
	for i, k := range keys {
		ttl := ttls[i].Val()
		switch {
		case ttl == -1:
			t.Errorf("%s has no TTL: it would outlive its use for ever", k)
		case ttl > 2*retention:
			t.Errorf("%s: TTL %s, above the longest lease and the retention %s", k, ttl, 2*retention)
		case strings.Contains(k, ":fence:") && ttl == -2 && now-fence < retention.Microseconds():
			t.Errorf("%s gone %s after its grant, before the retention %s", k,
				time.Duration(now-fence)*time.Microsecond, retention)
		}
	}
}

// Fences stay strictly increasing across a fence counter that Redis has
// expired: the next grant's fence comes from Redis's clock, which has passed
// the last grant by at least the retention.
func TestFencesIncreaseAcrossExpiredCounter(t *testing.T) {
	const retention = time.Second
	e := newTestEnv(t, withRetention(retention))
	const name = "rarely-used"
	var fences []int64
	for range 3 {
		fences = append(fences, grantAndReleaseShort(t, e, name))
		eventually(t, 30*time.Second, "the fence counter to expire", func() bool {
			n, err := e.RDB.Exists(t.Context(), e.fenceKey(name)).Result()
			if err != nil {
				t.Fatal(err)
			}
			return n == 0
		})
		if st := e.inspect(t, name); st.Fence != 0 || st.Held {
			t.Fatalf("%s after its counter expired: %+v, want free with fence 0", name, st)
		}
	}
	fences = append(fences, grantAndReleaseShort(t, e, name))
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences %v do not strictly increase across expired counters", fences)
		}
		// Redis sets and expires keys by the millisecond.
		if gap := time.Duration(fences[i]-fences[i-1]) * time.Microsecond; gap < retention-time.Millisecond {
			t.Errorf("fences %d and %d are %s apart, want at least the retention %s (the counter expired by Redis's clock)",
				fences[i-1], fences[i], gap, retention)
		}
	}
}

// grantAndReleaseShort takes name for a second, lets it go and returns the
// grant's fence.
func grantAndReleaseShort(t *testing.T, e *testEnv, name string) int64 {
	t.Helper()
	l := e.acquire(t, name, `{"ttl":"1s"}`)
	wantStatus(t, e.do(t, "DELETE", "/v1/locks/"+name, "", "Lock-Token", l.Token), http.StatusOK)
	return l.Fence
}

// On a real Redis as on miniredis, the key holding a name's last fence
// (the fence counter, a semaphore's capacity record) is kept for the
// longest lease on it and the retention after it: a shorter lease beside
// a longer one does not cut that, and the release that leaves no lease
// keeps it for the retention only.
func TestFenceRetentionFollowsTheLeaseOnRedis(t *testing.T) {
	const retention = 10 * time.Minute
	e := newTestEnv(t, withServiceConfig(func(sc *serviceConfig) { sc.FenceTTL = retention }))
	svc := e.Svc
	read := func(ttl time.Duration) locks.AcquireRequest {
		return locks.AcquireRequest{Mode: locks.ModeRead, TTL: ttl}
	}
	sem := func(ttl time.Duration) locks.SemaphoreRequest {
		return locks.SemaphoreRequest{AcquireRequest: locks.AcquireRequest{TTL: ttl}, Permits: 5, Count: 1}
	}
	cases := []struct {
		name    string
		key     string
		grant   func(ttl time.Duration) (token string, err error)
		release func(token string) error
	}{
		{"read lease", locks.RWKeysOf(e.Prefix, "catalog").State,
			func(ttl time.Duration) (string, error) {
				l, err := svc.AcquireRW(t.Context(), "catalog", read(ttl))
				return l.Token, err
			},
			func(tok string) error {
				_, err := svc.ReleaseRW(t.Context(), "catalog", tok, locks.ModeRead)
				return err
			}},
		{"semaphore", locks.SemaphoreKeysOf(e.Prefix, "pool").Capacity,
			func(ttl time.Duration) (string, error) {
				l, err := svc.AcquireSemaphore(t.Context(), "pool", sem(ttl))
				return l.Token, err
			},
			func(tok string) error { _, err := svc.ReleaseSemaphore(t.Context(), "pool", tok); return err }},
	}
	// PTTL reads a little below what was set, by the time the test took.
	const slack = 5 * time.Second
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pttl := func() time.Duration {
				d, err := e.RDB.PTTL(t.Context(), c.key).Result()
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			long, err := c.grant(time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			short, err := c.grant(time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if d := pttl(); d < time.Hour+retention-slack || d > time.Hour+retention {
				t.Errorf("%s PTTL with a 1h and a 1m lease = %s, want the 1h lease and the retention, %s", c.key, d, time.Hour+retention)
			}
			if err := c.release(short); err != nil {
				t.Fatal(err)
			}
			if d := pttl(); d < time.Hour+retention-slack {
				t.Errorf("%s PTTL after the 1m lease's release = %s, want %s still", c.key, d, time.Hour+retention)
			}
			if err := c.release(long); err != nil {
				t.Fatal(err)
			}
			if d := pttl(); d < retention-slack || d > retention {
				t.Errorf("%s PTTL once no lease is left = %s, want the retention %s", c.key, d, retention)
			}
		})
	}
}
