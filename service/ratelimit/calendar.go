package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/latchkey/latchkey/service/store"
)

// The periods of a calendar window.
const (
	CalendarDay   = "day"
	CalendarWeek  = "week"
	CalendarMonth = "month"
	CalendarYear  = "year"
)

// Calendar makes a fixed window the calendar period that holds the Redis
// clock's now, in a time zone: a monthly quota starts afresh at 00:00 on
// the 1st in that zone, whatever the month's length and its DST changes.
// The counter of a period expires as the period ends.
type Calendar struct {
	// Period is day, week, month or year.
	Period string
	// Timezone is an IANA zone name (Europe/Berlin), as time.LoadLocation
	// reads it; "" is UTC.
	Timezone string `json:",omitempty"`
	// WeekStart is the weekday a week starts on (monday ... sunday);
	// "" is monday. Weeks only.
	WeekStart string `json:",omitempty"`
}

// weekdays are the week_start names by their time.Weekday.
var weekdays = [7]string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

// validate checks c as the calendar of a limit, field names prefixed with
// prefix. Returns a *ValidationError.
func (c *Calendar) validate(prefix string, l Limit) error {
	switch c.Period {
	case CalendarDay, CalendarWeek, CalendarMonth, CalendarYear:
	default:
		return invalid(prefix+"calendar", "oneof", "%scalendar must be one of day, week, month, year, got %q", prefix, c.Period)
	}
	if l.Algorithm != FixedWindow {
		return invalid(prefix+"calendar", "excluded", "%scalendar applies to the fixed_window algorithm only (a period's counter starts afresh as the period begins)", prefix)
	}
	if l.Window != 0 {
		return invalid(prefix+"window", "excluded", "%swindow and calendar exclude each other: a calendar window lasts its period", prefix)
	}
	if l.Lease != 0 {
		return invalid(prefix+"lease", "excluded", "%slease does not apply to calendar windows", prefix)
	}
	if _, err := location(c.Timezone); err != nil {
		return invalid(prefix+"timezone", "timezone", "%stimezone must be an IANA time zone name such as Europe/Berlin, got %q", prefix, c.Timezone)
	}
	if c.WeekStart != "" {
		if c.Period != CalendarWeek {
			return invalid(prefix+"week_start", "excluded", "%sweek_start applies to calendar: week only", prefix)
		}
		if _, ok := weekday(c.WeekStart); !ok {
			return invalid(prefix+"week_start", "oneof", "%sweek_start must be a weekday (monday ... sunday), got %q", prefix, c.WeekStart)
		}
	}
	return nil
}

// weekday reads a week_start name.
func weekday(name string) (time.Weekday, bool) {
	if name == "" {
		return time.Monday, true
	}
	for i, n := range weekdays {
		if strings.EqualFold(n, name) {
			return time.Weekday(i), true
		}
	}
	return 0, false
}

// locations caches the zones read by time.LoadLocation, which reads the
// zone database on every call. Only validated limits' zones are loaded, so
// it holds at most the zones of the configured policies.
var locations sync.Map // string -> *time.Location

// location returns the zone named name ("" is UTC).
func location(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if l, ok := locations.Load(name); ok {
		return l.(*time.Location), nil
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	locations.Store(name, l)
	return l, nil
}

// Bounds returns the period of c that holds t: its start and its end (the
// next period's start), both at 00:00 in c's zone.
func (c *Calendar) Bounds(t time.Time) (start, end time.Time) {
	loc, err := location(c.Timezone)
	if err != nil {
		loc = time.UTC // validated limits never get here
	}
	lt := t.In(loc)
	y, m, d := lt.Date()
	switch c.Period {
	case CalendarWeek:
		ws, _ := weekday(c.WeekStart)
		back := (int(lt.Weekday()) - int(ws) + 7) % 7
		start, end = midnight(y, m, d-back, loc), midnight(y, m, d-back+7, loc)
	case CalendarMonth:
		start, end = midnight(y, m, 1, loc), midnight(y, m+1, 1, loc)
	case CalendarYear:
		start, end = midnight(y, time.January, 1, loc), midnight(y+1, time.January, 1, loc)
	default:
		start, end = midnight(y, m, d, loc), midnight(y, m, d+1, loc)
	}
	return start, end
}

// midnight is 00:00 of the day y-m-d (normalized) in loc. Where a DST
// change skips 00:00, time.Date gives the instant of the change, which
// begins the day.
func midnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	return time.Date(y, m, d, 0, 0, 0, 0, loc)
}

// LongestWindow is the longest window of a policy's limit: a leap year
// and a day, so a calendar year or a 365-day window fits. Inline limits
// stay within Config.MaxWindow, as anyone may make their counters.
const LongestWindow = 367 * 24 * time.Hour

// ParseCalendar returns the calendar a limit's calendar, timezone and
// week_start fields give, nil when calendar is empty; it is checked with
// the limit. Returns an error for a timezone or week_start without a
// calendar.
func ParseCalendar(period, timezone, weekStart string) (*Calendar, error) {
	if period == "" {
		if timezone != "" || weekStart != "" {
			return nil, errors.New("timezone and week_start apply to calendar windows only: give calendar (day, week, month or year)")
		}
		return nil, nil
	}
	return &Calendar{Period: period, Timezone: timezone, WeekStart: strings.ToLower(weekStart)}, nil
}

// periodTries bounds the calls of one periodCall: a call whose periods the
// Redis clock has left is made again for the periods it names, which only
// a period ending between the two calls makes miss again.
const periodTries = 3

// periodCall runs sc on rkeys, the Redis keys of limits, with argv, after
// naming each calendar window's counter and period for the period that
// holds the Redis clock's now: first as this instance last saw the Redis
// clock, then, when the script answers that another period holds now
// (lib/period.lua), for the period of the now it answers. set writes limit
// i's period, in Unix milliseconds, into argv. Returns the script's reply,
// the instant the calendar windows' periods were computed for (zero
// without one), and the store's error.
func (s *Service) periodCall(ctx context.Context, sc *store.Script, limits []NamedLimit, rkeys []string, argv []any,
	set func(argv []any, i int, start, end int64)) (any, time.Time, error) {
	var cal bool
	for _, l := range limits {
		cal = cal || l.Calendar != nil
	}
	if !cal {
		res, err := s.st.Run(ctx, sc, rkeys, argv...)
		return res, time.Time{}, err
	}
	keys := slices.Clone(rkeys)
	at := time.Now().Add(time.Duration(s.redisClockAhead.Load()))
	for try := 1; ; try++ {
		for i, l := range limits {
			if l.Calendar == nil {
				continue
			}
			start, end := l.Calendar.Bounds(at)
			keys[i] = periodKey(rkeys[i], start)
			set(argv, i, start.UnixMilli(), end.UnixMilli())
		}
		res, err := s.st.Run(ctx, sc, keys, argv...)
		if err != nil {
			return nil, at, err
		}
		now, miss := periodMiss(res)
		if !miss {
			return res, at, nil
		}
		s.redisClockAhead.Store(int64(time.Until(now)))
		if try == periodTries {
			return nil, at, fmt.Errorf("%s: the Redis clock left the calendar period %d times in a row: %w", sc.Name(), periodTries, store.ErrUnavailable)
		}
		at = now
	}
}

// periodMiss reads lib/period.lua's reply to a call whose periods do not
// hold now: {-2, now_ms}.
func periodMiss(res any) (time.Time, bool) {
	arr, ok := res.([]any)
	if !ok || len(arr) != 2 || arr[0] != int64(-2) {
		return time.Time{}, false
	}
	ms, ok := arr[1].(int64)
	return time.UnixMilli(ms), ok
}
