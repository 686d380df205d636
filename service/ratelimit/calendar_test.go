package ratelimit_test

import (
	"cmp"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	gocmp "github.com/google/go-cmp/cmp"
	"github.com/latchkey/latchkey/service/ratelimit"
	"github.com/latchkey/latchkey/service/store"
)

// in parses a wall-clock time in the zone tz.
func in(t *testing.T, tz, wall string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.ParseInLocation("2006-01-02 15:04:05", wall, loc)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// TestCalendarBounds: a calendar window is the period in its zone that
// holds the instant, from 00:00 of its first day to 00:00 of the next
// period's, whatever the month's length and the DST changes inside it.
func TestCalendarBounds(t *testing.T) {
	for _, tt := range []struct {
		name       string
		cal        ratelimit.Calendar
		at         string // wall clock in cal's zone
		start, end string // wall clock in cal's zone
		wantLength time.Duration
	}{
		{"February of a leap year has 29 days", ratelimit.Calendar{Period: "month", Timezone: "UTC"},
			"2028-02-29 23:59:59", "2028-02-01 00:00:00", "2028-03-01 00:00:00", 29 * 24 * time.Hour},
		{"February of another year has 28", ratelimit.Calendar{Period: "month"},
			"2026-02-14 12:00:00", "2026-02-01 00:00:00", "2026-03-01 00:00:00", 28 * 24 * time.Hour},
		{"April has 30", ratelimit.Calendar{Period: "month", Timezone: "UTC"},
			"2026-04-30 23:59:59", "2026-04-01 00:00:00", "2026-05-01 00:00:00", 30 * 24 * time.Hour},
		{"January has 31", ratelimit.Calendar{Period: "month", Timezone: "UTC"},
			"2026-01-01 00:00:00", "2026-01-01 00:00:00", "2026-02-01 00:00:00", 31 * 24 * time.Hour},
		{"March in Berlin loses the hour of its DST change", ratelimit.Calendar{Period: "month", Timezone: "Europe/Berlin"},
			"2026-03-29 03:30:00", "2026-03-01 00:00:00", "2026-04-01 00:00:00", 31*24*time.Hour - time.Hour},
		{"the day Berlin springs forward has 23 hours", ratelimit.Calendar{Period: "day", Timezone: "Europe/Berlin"},
			"2026-03-29 01:59:59", "2026-03-29 00:00:00", "2026-03-30 00:00:00", 23 * time.Hour},
		{"the day Berlin falls back has 25 hours", ratelimit.Calendar{Period: "day", Timezone: "Europe/Berlin"},
			"2026-10-25 23:00:00", "2026-10-25 00:00:00", "2026-10-26 00:00:00", 25 * time.Hour},
		{"the day New York springs forward has 23 hours", ratelimit.Calendar{Period: "day", Timezone: "America/New_York"},
			"2026-03-08 12:00:00", "2026-03-08 00:00:00", "2026-03-09 00:00:00", 23 * time.Hour},
		{"November in New York gains the hour of its DST change", ratelimit.Calendar{Period: "month", Timezone: "America/New_York"},
			"2026-11-30 23:59:59", "2026-11-01 00:00:00", "2026-12-01 00:00:00", 30*24*time.Hour + time.Hour},
		{"the last second of a year is in it", ratelimit.Calendar{Period: "year", Timezone: "Europe/Berlin"},
			"2026-12-31 23:59:59", "2026-01-01 00:00:00", "2027-01-01 00:00:00", 365 * 24 * time.Hour},
		{"the first second of a year starts the next", ratelimit.Calendar{Period: "year", Timezone: "America/New_York"},
			"2027-01-01 00:00:00", "2027-01-01 00:00:00", "2028-01-01 00:00:00", 365 * 24 * time.Hour},
		{"a week starts on Monday", ratelimit.Calendar{Period: "week", Timezone: "Europe/Berlin"},
			"2026-12-06 23:59:59", "2026-11-30 00:00:00", "2026-12-07 00:00:00", 7 * 24 * time.Hour},
		{"or on the week_start day", ratelimit.Calendar{Period: "week", Timezone: "America/New_York", WeekStart: "sunday"},
			"2026-12-06 00:00:00", "2026-12-06 00:00:00", "2026-12-13 00:00:00", 7 * 24 * time.Hour},
		{"a week across the year end", ratelimit.Calendar{Period: "week", Timezone: "UTC"},
			"2027-01-01 08:00:00", "2026-12-28 00:00:00", "2027-01-04 00:00:00", 7 * 24 * time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tz := tt.cal.Timezone
			if tz == "" {
				tz = "UTC"
			}
			start, end := tt.cal.Bounds(in(t, tz, tt.at))
			if want := in(t, tz, tt.start); !start.Equal(want) {
				t.Errorf("start = %s, want %s", start, want)
			}
			if want := in(t, tz, tt.end); !end.Equal(want) {
				t.Errorf("end = %s, want %s", end, want)
			}
			if got := end.Sub(start); got != tt.wantLength {
				t.Errorf("length = %s, want %s", got, tt.wantLength)
			}
		})
	}
}

// monthly is a policy of limit units per calendar month in Europe/Berlin.
func monthly(limit int64) ratelimit.Policy {
	return ratelimit.Policy{Name: "monthly", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: limit,
		Calendar: &ratelimit.Calendar{Period: "month", Timezone: "Europe/Berlin"}}}
}

// periodKeyOf is the Redis key of a single-limit calendar policy's counter
// of key for the period holding at.
func periodKeyOf(svc *ratelimit.Service, pol ratelimit.Policy, key string, at time.Time) string {
	return svc.KeysAt(pol, []string{key}, at)[0]
}

// TestCalendarMonthStartsAfreshOnTheFirst: on the Redis clock (miniredis's,
// years away from this machine's), a monthly quota in Berlin counts until
// 23:59:59 on the last day of February and starts afresh at 00:00 on
// March 1st, Berlin time; the counter expires exactly as its month ends.
func TestCalendarMonthStartsAfreshOnTheFirst(t *testing.T) {
	pol := monthly(3)
	svc, m := newTestService(t, rlConfig(0, pol))
	req := ratelimit.Request{Policy: "monthly", Key: "acct-1"}

	last := in(t, "Europe/Berlin", "2026-02-28 23:59:59")
	m.SetTime(last)
	for i, want := range []bool{true, true, true, false} {
		d := mustCheck(t, svc, req)
		if d.Allowed != want {
			t.Fatalf("request %d: allowed = %v, want %v", i+1, d.Allowed, want)
		}
		if d.Window != 28*24*time.Hour {
			t.Errorf("request %d: window = %s, want February's 672h", i+1, d.Window)
		}
		if d.ResetAfter != time.Second {
			t.Errorf("request %d: reset after %s, want 1s (the month's end)", i+1, d.ResetAfter)
		}
	}
	key := periodKeyOf(svc, pol, "acct-1", in(t, "Europe/Berlin", "2026-02-01 00:00:00"))
	if got, err := m.Get(key); err != nil || got != "3" {
		t.Fatalf("February's counter %s = %q (%v), want 3", key, got, err)
	}
	if got := m.TTL(key); got != time.Second {
		t.Errorf("February's counter expires in %s, want 1s: as the month ends", got)
	}

	m.SetTime(in(t, "Europe/Berlin", "2026-03-01 00:00:00"))
	d := mustCheck(t, svc, req)
	if !d.Allowed || d.Remaining != 2 {
		t.Fatalf("on March 1st: allowed = %v, remaining = %d; want a fresh month with 2 left", d.Allowed, d.Remaining)
	}
	march := periodKeyOf(svc, pol, "acct-1", in(t, "Europe/Berlin", "2026-03-01 00:00:00"))
	if want := 31*24*time.Hour - time.Hour; m.TTL(march) != want {
		t.Errorf("March's counter expires in %s, want %s (31 days less the DST hour)", m.TTL(march), want)
	}
}

// TestCalendarLimitAmongOthers: a calendar month and a per-minute window of
// one policy are decided together; a denial by either counts nothing.
func TestCalendarLimitAmongOthers(t *testing.T) {
	pol := ratelimit.Policy{Name: "llm", Limits: []ratelimit.NamedLimit{
		{Name: "per-minute", Key: "header:X-Account", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 100, Window: time.Minute}},
		{Name: "per-month", Key: "header:X-Account", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 5,
			Calendar: &ratelimit.Calendar{Period: "month", Timezone: "America/New_York"}}},
	}}
	svc, m := newTestService(t, rlConfig(0, pol))
	m.SetTime(in(t, "America/New_York", "2026-11-30 23:00:00"))
	req := ratelimit.Request{Policy: "llm", Key: "acct-1", Cost: 4}
	if d := mustCheck(t, svc, req); !d.Allowed || d.Binding != "per-month" || d.Remaining != 1 {
		t.Fatalf("first: %+v, want allowed with 1 left of the month", d)
	}
	if d := mustCheck(t, svc, req); d.Allowed || d.Binding != "per-month" {
		t.Fatalf("second: %+v, want denied by the month", d)
	}
	if got := mustCheck(t, svc, ratelimit.Request{Policy: "llm", Key: "acct-1", Peek: true, Cost: 1}); got.Limits[0].Remaining != 96 {
		t.Errorf("per-minute has %d left, want 96: the denial counted nothing", got.Limits[0].Remaining)
	}
}

// TestPeekChangesNothing: a peek answers the decision a request would get
// and leaves every key as it was, byte for byte and with its expiry.
func TestPeekChangesNothing(t *testing.T) {
	for _, pol := range []ratelimit.Policy{
		fixed("fw", 3, 10*time.Second),
		{Name: "tb", Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 3, Window: 10 * time.Second}},
		{Name: "sw", Limit: ratelimit.Limit{Algorithm: ratelimit.SlidingWindow, Limit: 3, Window: 10 * time.Second}},
		monthly(3),
	} {
		t.Run(pol.Name, func(t *testing.T) {
			svc, m := newTestService(t, rlConfig(0, pol))
			req := ratelimit.Request{Policy: pol.Name, Key: "k"}
			mustCheck(t, svc, req)
			before := snapshot(m)
			peek := req
			peek.Peek = true
			d := mustCheck(t, svc, peek)
			if !d.Allowed || d.Remaining != 2 {
				t.Errorf("peek: allowed = %v, remaining = %d; want allowed with the 2 left now", d.Allowed, d.Remaining)
			}
			peek.Cost = 3
			if d := mustCheck(t, svc, peek); d.Allowed {
				t.Errorf("peek of 3 with 2 left: allowed, want denied")
			}
			if diff := gocmp.Diff(before, snapshot(m)); diff != "" {
				t.Errorf("a peek changed Redis (-before +after):\n%s", diff)
			}
		})
	}
}

// snapshot is every key of m with its value and expiry.
func snapshot(m *miniredis.Miniredis) map[string]string {
	out := map[string]string{}
	for _, k := range m.Keys() {
		v, _ := m.Get(k)
		out[k] = v + " ttl=" + m.TTL(k).String()
	}
	return out
}

// TestRefundNeverGoesBelowZero: a negative cost gives units back to the
// counter, which keeps its expiry and never goes below zero.
func TestRefundNeverGoesBelowZero(t *testing.T) {
	for _, pol := range []ratelimit.Policy{fixed("fw", 10, time.Hour), monthly(10)} {
		t.Run(pol.Name, func(t *testing.T) {
			svc, m := newTestService(t, rlConfig(0, pol))
			mustCheck(t, svc, ratelimit.Request{Policy: pol.Name, Key: "k", Cost: 8})
			keys := m.Keys()
			if len(keys) != 1 {
				t.Fatalf("keys = %v, want one counter", keys)
			}
			ttl := m.TTL(keys[0])
			d := mustCheck(t, svc, ratelimit.Request{Policy: pol.Name, Key: "k", Cost: -5})
			if !d.Allowed || d.Remaining != 7 {
				t.Errorf("refund of 5: allowed = %v, remaining = %d; want 7", d.Allowed, d.Remaining)
			}
			if got, _ := m.Get(keys[0]); got != "3" {
				t.Errorf("counter = %s after the refund, want 3", got)
			}
			if m.TTL(keys[0]) != ttl {
				t.Errorf("expiry moved from %s to %s", ttl, m.TTL(keys[0]))
			}
			d = mustCheck(t, svc, ratelimit.Request{Policy: pol.Name, Key: "k", Cost: -5})
			if d.Remaining != 10 {
				t.Errorf("refund of 5 more than counted: remaining = %d, want 10 (never below zero)", d.Remaining)
			}
			if m.Exists(keys[0]) {
				t.Errorf("the counter refunded to zero is still there")
			}
			if d := mustCheck(t, svc, ratelimit.Request{Policy: pol.Name, Key: "k", Cost: 10}); !d.Allowed {
				t.Errorf("the whole limit after the refunds: denied, want allowed")
			}
		})
	}
}

// TestRefundAndPeekRefusals: what a refund cannot do is a validation error
// naming the field, and changes nothing.
func TestRefundAndPeekRefusals(t *testing.T) {
	tb := ratelimit.Policy{Name: "tb", Limit: ratelimit.Limit{Algorithm: ratelimit.TokenBucket, Limit: 3, Window: 10 * time.Second}}
	svc, m := newTestService(t, rlConfig(0, fixed("fw", 3, 10*time.Second), tb))
	mustCheck(t, svc, ratelimit.Request{Policy: "fw", Key: "k"})
	mustCheck(t, svc, ratelimit.Request{Policy: "tb", Key: "k"})
	before := snapshot(m)
	for _, tt := range []struct {
		req   ratelimit.Request
		field string
	}{
		{ratelimit.Request{Policy: "tb", Key: "k", Cost: -1}, "cost"},
		{ratelimit.Request{Policy: "fw", Key: "k", Cost: -4}, "cost"},
		{ratelimit.Request{Policy: "fw", Key: "k", Cost: -1, Peek: true}, "peek"},
	} {
		_, err := svc.Check(t.Context(), tt.req)
		var ve *store.ValidationError
		if !errors.As(err, &ve) || ve.Field != tt.field {
			t.Errorf("Check(%+v) = %v, want a validation error of %s", tt.req, err, tt.field)
		}
	}
	if diff := gocmp.Diff(before, snapshot(m)); diff != "" {
		t.Errorf("a refused request changed Redis (-before +after):\n%s", diff)
	}
}

// TestResetKey: an operator's reset gives one key its whole limits back
// and leaves every other key as it was.
func TestResetKey(t *testing.T) {
	pol := ratelimit.Policy{Name: "api", Limits: []ratelimit.NamedLimit{
		{Name: "per-ip", Key: "ip", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 2, Window: time.Hour}},
		{Name: "month", Key: "ip", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 2,
			Calendar: &ratelimit.Calendar{Period: "month", Timezone: "Europe/Berlin"}}},
		{Name: "global", Key: "const", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 100, Window: time.Hour}},
	}}
	svc, m := newTestService(t, rlConfig(0, pol, fixed("single", 1, time.Hour)))
	for _, key := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.2"} {
		mustCheck(t, svc, ratelimit.Request{Policy: "api", Key: key})
	}
	mustCheck(t, svc, ratelimit.Request{Policy: "single", Key: "192.0.2.1"})
	if d := mustCheck(t, svc, ratelimit.Request{Policy: "single", Key: "192.0.2.1"}); d.Allowed {
		t.Fatal("single: the second request was allowed")
	}
	before := snapshot(m)

	n, err := svc.ResetKey(t.Context(), "api", "192.0.2.1")
	if err != nil || n != 2 {
		t.Fatalf("ResetKey = %d, %v; want its 2 counters", n, err)
	}
	after := snapshot(m)
	for k := range before {
		if _, ok := after[k]; !ok {
			delete(before, k)
		}
	}
	if len(after) != len(before) || len(after) != 4 {
		t.Errorf("keys left %v, want the other client's 2, the const one and single's", after)
	}
	if d := mustCheck(t, svc, ratelimit.Request{Policy: "api", Key: "192.0.2.1", Peek: true, Cost: 2}); !d.Allowed {
		t.Errorf("after the reset: %+v, want the whole limits", d)
	}
	if n, err := svc.ResetKey(t.Context(), "single", "192.0.2.1"); err != nil || n != 1 {
		t.Fatalf("ResetKey(single) = %d, %v", n, err)
	}
	if d := mustCheck(t, svc, ratelimit.Request{Policy: "single", Key: "192.0.2.1"}); !d.Allowed {
		t.Errorf("single after its reset: denied (a cached denial?), want allowed")
	}
	if _, err := svc.ResetKey(t.Context(), "nope", "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ResetKey of an unknown policy = %v, want ErrNotFound", err)
	}
	if _, err := svc.ResetKey(t.Context(), "api", "a b"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ResetKey of a malformed key = %v, want ErrInvalid", err)
	}
}

// TestParseCalendarPolicies: a policy file gives a calendar window with
// calendar, timezone and week_start, in YAML and JSON alike, in the short
// form and in a limits: list; a timezone without a calendar is refused.
func TestParseCalendarPolicies(t *testing.T) {
	yaml := `
policies:
  monthly:
    limit: 1000000
    calendar: month
    timezone: Europe/Berlin
  llm:
    limits:
      - {name: weekly, key: header:X-Account, limit: 50000, calendar: week, timezone: America/New_York, week_start: sunday}
      - {name: yearly, key: header:X-Account, limit: 2000000, window: 8760h}
`
	json := `{"policies": {"monthly": {"limit": 1000000, "calendar": "month", "timezone": "Europe/Berlin"},
	  "llm": {"limits": [
	    {"name": "weekly", "key": "header:X-Account", "limit": 50000, "calendar": "week", "timezone": "America/New_York", "week_start": "sunday"},
	    {"name": "yearly", "key": "header:X-Account", "limit": 2000000, "window": "8760h"}]}}}`
	forEachPolicyFile(t, yaml, json, func(t *testing.T, ps []ratelimit.Policy) {
		if got, want := ps[1].Calendar, (&ratelimit.Calendar{Period: "month", Timezone: "Europe/Berlin"}); !gocmp.Equal(got, want) {
			t.Errorf("monthly's calendar = %+v, want %+v", got, want)
		}
		if got, want := ps[0].Limits[0].Calendar, (&ratelimit.Calendar{Period: "week", Timezone: "America/New_York", WeekStart: "sunday"}); !gocmp.Equal(got, want) {
			t.Errorf("weekly's calendar = %+v, want %+v", got, want)
		}
		if got := ps[0].Limits[1].Window; got != 8760*time.Hour {
			t.Errorf("yearly's window = %s, want 8760h", got)
		}
	})
	_, err := ratelimit.ParsePolicies([]byte("policies:\n  p: {limit: 3, window: 1h, timezone: UTC}\n"), false)
	if err == nil || err.Error() != `policy "p": timezone and week_start apply to calendar windows only: give calendar (day, week, month or year)` {
		t.Errorf("timezone without calendar: %v", err)
	}
}

// TestCalendarFailsOpenWithItsPeriod: with Redis out of reach, a
// fail-open calendar policy allows, degraded, and answers the period of
// this instance's clock: its length and the time to its end.
func TestCalendarFailsOpenWithItsPeriod(t *testing.T) {
	cfg := rlConfig(0, monthly(5))
	cfg.RateLimit.Timeout = 100 * time.Millisecond
	m, rdb := newTestRedis(t)
	svc := mustNew(t, rdb, cfg)
	m.Close()
	before := time.Now()
	d, err := svc.Check(t.Context(), ratelimit.Request{Policy: "monthly", Key: "k"})
	after := time.Now()
	if err != nil || !d.Allowed || !d.Degraded || d.Remaining != 4 {
		t.Fatalf("fail-open: %+v, %v; want allowed, degraded, remaining 4", d, err)
	}
	start, end := monthly(5).Calendar.Bounds(before)
	if d.Window != end.Sub(start) || d.ResetAfter > end.Sub(before) || d.ResetAfter < end.Sub(after) {
		t.Errorf("window %s, reset after %s; want this month's %s and the time to its end", d.Window, d.ResetAfter, end.Sub(start))
	}
}

// TestCalendarPeriodsOnTheRedisClock: by the Redis clock (miniredis's), a
// calendar window's last second still counts in its period, whose counter
// expires exactly at its end, and the next period's first second starts
// afresh: months of 29, 30 and 31 days, the days of DST changes in Berlin
// and New York, and a year's end.
func TestCalendarPeriodsOnTheRedisClock(t *testing.T) {
	for _, tt := range []struct {
		name     string
		cal      ratelimit.Calendar
		last     string // the period's last second, wall clock in its zone
		wantLeft time.Duration
	}{
		{"February of a leap year", ratelimit.Calendar{Period: "month", Timezone: "UTC"}, "2028-02-29 23:59:59", time.Second},
		{"April", ratelimit.Calendar{Period: "month", Timezone: "Europe/Berlin"}, "2026-04-30 23:59:59", time.Second},
		{"January", ratelimit.Calendar{Period: "month", Timezone: "America/New_York"}, "2026-01-31 23:59:59", time.Second},
		{"Berlin's spring-forward day, before its change", ratelimit.Calendar{Period: "day", Timezone: "Europe/Berlin"}, "2026-03-29 01:59:59", 21*time.Hour + time.Second},
		{"New York's fall-back day", ratelimit.Calendar{Period: "day", Timezone: "America/New_York"}, "2026-11-01 00:00:00", 25 * time.Hour},
		{"a year's end", ratelimit.Calendar{Period: "year", Timezone: "America/New_York"}, "2026-12-31 23:59:59", time.Second},
		{"a week's end", ratelimit.Calendar{Period: "week", Timezone: "Europe/Berlin", WeekStart: "sunday"}, "2026-12-05 23:59:59", time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pol := ratelimit.Policy{Name: "q", Limit: ratelimit.Limit{Algorithm: ratelimit.FixedWindow, Limit: 2, Calendar: &tt.cal}}
			svc, m := newTestService(t, rlConfig(0, pol))
			req := ratelimit.Request{Policy: "q", Key: "k", Cost: 2}
			tz := cmp.Or(tt.cal.Timezone, "UTC")
			at := in(t, tz, tt.last)
			m.SetTime(at)
			if d := mustCheck(t, svc, req); !d.Allowed || d.ResetAfter != tt.wantLeft {
				t.Fatalf("at %s: %+v, want allowed with %s to the period's end", tt.last, d, tt.wantLeft)
			}
			if d := mustCheck(t, svc, req); d.Allowed {
				t.Fatalf("at %s again: allowed, want the period spent", tt.last)
			}
			key := periodKeyOf(svc, pol, "k", at)
			if got := m.TTL(key); got != tt.wantLeft {
				t.Errorf("the period's counter expires in %s, want %s", got, tt.wantLeft)
			}
			_, end := tt.cal.Bounds(at)
			m.SetTime(end)
			if d := mustCheck(t, svc, req); !d.Allowed || d.Remaining != 0 {
				t.Errorf("at the next period's start (%s): %+v, want its whole limit", end, d)
			}
			if next := periodKeyOf(svc, pol, "k", end); next == key {
				t.Errorf("the next period counts on the same key %s", key)
			}
		})
	}
}

// TestWindowsLongerThanADay: a policy's window may be a year (8760h) for
// every algorithm, counted as a shorter one is, its key kept for as long as
// its state matters: a fixed window's for the window, a sliding window's
// for two, a token bucket's until it is full again.
func TestWindowsLongerThanADay(t *testing.T) {
	year := 8760 * time.Hour
	for _, tt := range []struct {
		alg     ratelimit.Algorithm
		wantTTL time.Duration
	}{
		{ratelimit.FixedWindow, year},
		{ratelimit.SlidingWindow, 2 * year},
		{ratelimit.TokenBucket, year}, // empty: three tokens of a third of a year each
	} {
		t.Run(string(tt.alg), func(t *testing.T) {
			pol := ratelimit.Policy{Name: "yearly", Limit: ratelimit.Limit{Algorithm: tt.alg, Limit: 3, Window: year}}
			svc, m := newTestService(t, rlConfig(0, pol))
			req := ratelimit.Request{Policy: "yearly", Key: "k"}
			for i, want := range []bool{true, true, true, false} {
				if d := mustCheck(t, svc, req); d.Allowed != want {
					t.Fatalf("request %d: allowed = %v, want %v", i+1, d.Allowed, want)
				}
			}
			key := svc.Keys(pol, []string{"k"})[0]
			if got := m.TTL(key); got > tt.wantTTL || got < tt.wantTTL-time.Second {
				t.Errorf("key kept %s, want %s", got, tt.wantTTL)
			}
		})
	}
}
