package integration

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/ratelimit"
)

// calendarPolicy is a fixed-window policy of limit units per calendar
// period in the zone tz.
func calendarPolicy(name string, limit int64, cal ratelimit.Calendar) ratelimit.Policy {
	return ratelimit.Policy{Name: name, Key: "header:X-Account",
		Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: limit, Calendar: &cal}}
}

// redisNow reads the Redis clock.
func (e *testEnv) redisNow(t testing.TB) time.Time {
	t.Helper()
	now, err := e.RDB.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now
}

// pexpireTime is the key's expiry by the Redis clock in Unix milliseconds
// (-2: no key, -1: no expiry).
func (e *testEnv) pexpireTime(t testing.TB, key string) int64 {
	t.Helper()
	at, err := e.RDB.Do(t.Context(), "PEXPIRETIME", key).Int64()
	if err != nil {
		t.Fatalf("PEXPIRETIME %s: %v", key, err)
	}
	return at
}

// TestCalendarWindowsOnRedisTime: on real Redis, whose clock no test sets,
// a calendar window counts in the period Redis TIME is in: its counter is
// the period's, and it expires exactly as the period ends (PEXPIRETIME),
// day, week, month and year, in zones with DST.
func TestCalendarWindowsOnRedisTime(t *testing.T) {
	ps := []ratelimit.Policy{
		calendarPolicy("daily", 5, ratelimit.Calendar{Period: "day", Timezone: "Europe/Berlin"}),
		calendarPolicy("weekly", 5, ratelimit.Calendar{Period: "week", Timezone: "America/New_York", WeekStart: "sunday"}),
		calendarPolicy("monthly", 5, ratelimit.Calendar{Period: "month", Timezone: "Europe/Berlin"}),
		calendarPolicy("yearly", 5, ratelimit.Calendar{Period: "year", Timezone: "America/New_York"}),
	}
	e := newTestEnv(t, withPolicies(ps...))
	for _, pol := range ps {
		t.Run(pol.Name, func(t *testing.T) {
			before := e.redisNow(t)
			_, d := e.check(t, `{"policy":"`+pol.Name+`","key":"acct-1","cost":2}`)
			after := e.redisNow(t)
			start, end := pol.Calendar.Bounds(before)
			if s, _ := pol.Calendar.Bounds(after); !s.Equal(start) {
				t.Skipf("the period changed during the check (%s)", s)
			}
			if !d.Allowed || d.Remaining != 3 {
				t.Fatalf("decision %+v, want allowed with 3 left", d)
			}
			key := e.Svc.KeysAt(pol, []string{"acct-1"}, before)[0]
			if got, err := e.RDB.Get(t.Context(), key).Result(); err != nil || got != "2" {
				t.Fatalf("counter %s = %q (%v), want 2: the period from %s", key, got, err, start)
			}
			if got := e.pexpireTime(t, key); got != end.UnixMilli() {
				t.Errorf("counter expires at %s, want %s: the period's end",
					time.UnixMilli(got).In(start.Location()), end)
			}
			if maxReset := end.Sub(before); time.Duration(d.ResetMS)*time.Millisecond > maxReset+time.Millisecond {
				t.Errorf("reset_ms %d is past the period's end (%s away)", d.ResetMS, maxReset)
			}
		})
	}
}

// TestPeekAndRefundOnRedis: a peek leaves Redis byte for byte as it was,
// expiries included; a refund lowers the counter, never below zero, and
// keeps its expiry; refused quota requests change nothing.
func TestPeekAndRefundOnRedis(t *testing.T) {
	monthly := calendarPolicy("monthly", 10, ratelimit.Calendar{Period: "month", Timezone: "Europe/Berlin"})
	bucket := policy("bucket", ratelimit.TokenBucket, 10, time.Hour)
	e := newTestEnv(t, withPolicies(monthly, bucket))
	e.check(t, `{"policy":"monthly","key":"acct-1","cost":8}`)
	e.check(t, `{"policy":"bucket","key":"acct-1"}`)
	key := e.Svc.KeysAt(monthly, []string{"acct-1"}, e.redisNow(t))[0]
	expiry := e.pexpireTime(t, key)

	before := e.dumps(t)
	_, d := e.check(t, `{"policy":"monthly","key":"acct-1","peek":true}`)
	if !d.Allowed || d.Remaining != 2 {
		t.Errorf("peek: %+v, want allowed with the 2 left now", d)
	}
	r, d := e.check(t, `{"policy":"monthly","key":"acct-1","peek":true,"cost":3}`)
	if r.Status != http.StatusTooManyRequests || d.Remaining != 2 {
		t.Errorf("peek of 3 with 2 left: %d %+v, want 429 with 2 left", r.Status, d)
	}
	for _, body := range []string{
		`{"policy":"monthly","key":"acct-1","cost":0}`,
		`{"policy":"monthly","key":"acct-1","cost":-1,"peek":true}`,
		`{"policy":"monthly","key":"acct-1","cost":-11}`,
		`{"policy":"bucket","key":"acct-1","cost":-1}`,
	} {
		wantProblem(t, e.do(t, "POST", "/v1/ratelimit/check", body), http.StatusBadRequest, "invalid-request")
	}
	if diff := cmp.Diff(before, e.dumps(t)); diff != "" {
		t.Errorf("a peek or a refused request changed Redis (-before +after):\n%s", diff)
	}
	if got := e.pexpireTime(t, key); got != expiry {
		t.Errorf("expiry moved from %d to %d", expiry, got)
	}

	_, d = e.check(t, `{"policy":"monthly","key":"acct-1","cost":-5}`)
	if !d.Allowed || d.Remaining != 7 {
		t.Errorf("refund of 5: %+v, want allowed with 7 left", d)
	}
	if got := e.pexpireTime(t, key); got != expiry {
		t.Errorf("the refund moved the expiry from %d to %d", expiry, got)
	}
	_, d = e.check(t, `{"policy":"monthly","key":"acct-1","cost":-10}`)
	if d.Remaining != 10 {
		t.Errorf("refund of more than is counted: remaining %d, want 10 (never below zero)", d.Remaining)
	}
	if n, err := e.RDB.Exists(t.Context(), key).Result(); err != nil || n != 0 {
		t.Errorf("the counter refunded to zero exists (%d, %v)", n, err)
	}
}

// TestResetKeyOnRedis: an admin's reset deletes one key's counters and no
// other; without the admin credential it changes nothing.
func TestResetKeyOnRedis(t *testing.T) {
	pol := ratelimit.Policy{Name: "api", Limits: []ratelimit.NamedLimit{
		{Name: "per-hour", Key: "header:X-Account", Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Limit: 3, Window: time.Hour}},
		{Name: "per-month", Key: "header:X-Account", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 100,
			Calendar: &ratelimit.Calendar{Period: "month", Timezone: "America/New_York"}}},
	}}
	e := newTestEnv(t, withPolicies(pol))
	for _, key := range []string{"acct-1", "acct-1", "acct-1", "acct-2"} {
		e.check(t, `{"policy":"api","key":"`+key+`"}`)
	}
	if r, _ := e.check(t, `{"policy":"api","key":"acct-1"}`); r.Status != http.StatusTooManyRequests {
		t.Fatalf("the 4th request of the hour: %d, want 429", r.Status)
	}
	before := e.dumps(t)
	wantProblem(t, e.do(t, "DELETE", "/v1/ratelimit/policies/api/keys/acct-1", ""), http.StatusForbidden, "forbidden")
	wantProblem(t, e.do(t, "DELETE", "/v1/ratelimit/policies/nope/keys/acct-1", "", "Authorization", "Bearer "+testAdminKey),
		http.StatusNotFound, "policy-not-found")
	if diff := cmp.Diff(before, e.dumps(t)); diff != "" {
		t.Fatalf("a refused reset changed Redis (-before +after):\n%s", diff)
	}

	r := e.do(t, "DELETE", "/v1/ratelimit/policies/api/keys/acct-1", "", "Authorization", "Bearer "+testAdminKey)
	wantStatus(t, r, http.StatusOK)
	if got := r.JSON(t)["counters"]; got != float64(2) {
		t.Errorf("counters = %v, want 2", got)
	}
	other := e.Svc.KeysAt(pol, []string{"acct-2", "acct-2"}, e.redisNow(t))
	want := map[string]string{other[0]: before[other[0]], other[1]: before[other[1]]}
	if diff := cmp.Diff(want, e.dumps(t)); diff != "" {
		t.Errorf("after the reset (-want +got):\n%s", diff)
	}
	if r, d := e.check(t, `{"policy":"api","key":"acct-1"}`); r.Status != http.StatusOK || d.Remaining != 2 {
		t.Errorf("after the reset: %d %+v, want allowed with 2 left", r.Status, d)
	}
}
