package locks

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// TestParseAcquired: a grant's notice is read as the acquire scripts
// publish it, a lock's with two fields and a semaphore's with three; any
// other message is a hint, not a notice.
func TestParseAcquired(t *testing.T) {
	tests := []struct {
		msg  string
		want grantNotice
		ok   bool
	}{
		{"acquired:1795406400000000:30000", grantNotice{fence: 1795406400000000, ttl: 30 * time.Second, available: -1}, true},
		{"acquired:7:100:2", grantNotice{fence: 7, ttl: 100 * time.Millisecond, available: 2}, true},
		{"acquired:7:100:0", grantNotice{fence: 7, ttl: 100 * time.Millisecond, available: 0}, true},
		{"acquired:7", grantNotice{}, false},
		{"acquired:7:100:2:1", grantNotice{}, false},
		{"acquired:7:-100", grantNotice{}, false},
		{"acquired:7:1e5", grantNotice{}, false},
		{"acquired:", grantNotice{}, false},
		{"acquired", grantNotice{}, false},
		{hintReleased, grantNotice{}, false},
		{"released:2", grantNotice{}, false},
		{hintGranted, grantNotice{}, false},
	}
	for _, tt := range tests {
		got, ok := parseAcquired(tt.msg)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseAcquired(%q) = %+v, %t; want %+v, %t", tt.msg, got, ok, tt.want, tt.ok)
		}
		if isNotice(tt.msg) != tt.ok {
			t.Errorf("isNotice(%q) = %t, want %t", tt.msg, !tt.ok, tt.ok)
		}
	}
}

// TestOfferNeverLosesAWakeUpToANotice: a listener's one pending message is
// a hint whenever a hint came since it last looked (a hint displaces a
// pending notice, and nothing displaces a pending hint), else the notice
// of the shortest lease.
func TestOfferNeverLosesAWakeUpToANotice(t *testing.T) {
	const long, short, shorter = "acquired:1:100", "acquired:2:50", "acquired:3:10"
	steps := []struct {
		msg     string
		taken   bool
		pending string
	}{
		{long, true, long},
		{short, true, short},
		{long, false, short},
		{hintReleased, true, hintReleased},
		{shorter, false, hintReleased},
		{hintForced, false, hintReleased},
	}
	c := make(chan string, 1)
	for i, s := range steps {
		if got := offer(c, s.msg); got != s.taken {
			t.Fatalf("step %d: offer(%q) = %t, want %t", i, s.msg, got, s.taken)
		}
		got := <-c
		if got != s.pending {
			t.Fatalf("step %d: pending %q after offering %q, want %q", i, got, s.msg, s.pending)
		}
		c <- got
	}
}

// TestSemaphoreNoticeWakesWhoFits: a semaphore's grant notice wakes, as a
// hint to try (hintGranted), the waiters of this process whose counts fit
// in the permits it left free, in arrival order, and reaches the others as
// the notice; a fair waiter is woken when permits are left, else it gets
// the notice.
func TestSemaphoreNoticeWakesWhoFits(t *testing.T) {
	sub := testSubscriber(t)
	w := &semWakes{sub: sub}
	join := func(channel string, count int64, fair bool) *semWaiter {
		t.Helper()
		sw, err := w.join(channel, count, fair, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sw.leave(false) })
		return sw
	}
	heard := func(sw *semWaiter) string { t.Helper(); return heardOn(t, sw.C()) }

	two, three, one := join("plain", 2, false), join("plain", 3, false), join("plain", 1, false)
	const left3 = "acquired:9:1000:3"
	sub.deliver("plain", left3)
	for _, c := range []struct {
		sw   *semWaiter
		want string
	}{{two, hintGranted}, {three, left3}, {one, hintGranted}} {
		if got := heard(c.sw); got != c.want {
			t.Errorf("waiter for %d of 3 free: %q, want %q", c.sw.count, got, c.want)
		}
	}

	fair := join("fair", 1, true)
	for _, msg := range []string{"acquired:9:1000:0", "acquired:10:1000:1"} {
		sub.deliver("fair", msg)
		want := msg
		if msg == "acquired:10:1000:1" {
			want = hintGranted
		}
		if got := heard(fair); got != want {
			t.Errorf("fair waiter on %q: %q, want %q", msg, got, want)
		}
	}
}

// TestSemaphoreNoticePastTheWaitIsNotPassedOn: a grant's notice of a lease
// that ends after a waiter's wait is over could not bring its re-check
// forward, and does not reach it (a waiter whose wait's end is not known
// hears it); a hint does.
func TestSemaphoreNoticePastTheWaitIsNotPassedOn(t *testing.T) {
	sub := testSubscriber(t)
	w := &semWakes{sub: sub}
	join := func(until time.Time) *semWaiter {
		t.Helper()
		sw, err := w.join("plain", 2, false, until)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sw.leave(false) })
		return sw
	}
	short, unknown := join(time.Now().Add(time.Second)), join(time.Time{})
	heard := func(sw *semWaiter) string { t.Helper(); return heardOn(t, sw.C()) }
	const notice, released = "acquired:9:60000:0", "released:4"
	sub.deliver("plain", notice)
	if got := heard(unknown); got != notice {
		t.Errorf("waiter whose wait's end is not known heard %q, want %q", got, notice)
	}
	sub.deliver("plain", released)
	if got := heard(short); got != released {
		t.Errorf("waiter whose wait ends in a second heard %q first, want %q", got, released)
	}
}

// TestDrainedWakesOnlyWriters: when a read/write lock's last reader leaves
// (hintDrained) only its waiting writers are woken; a waiting reader, which
// only a writer blocks, is not sent to Redis for nothing. A writer's
// release (hintReleased) wakes both.
func TestDrainedWakesOnlyWriters(t *testing.T) {
	sub := testSubscriber(t)
	s := &Service{sub: sub}
	p := rwlock{leaseBase{s: s}}
	k := keysOf("lk:", kindRW, "orders")
	listen := func(mode RWMode) wakeups {
		t.Helper()
		w, err := p.listen(k, AcquireRequest{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.leave(false) })
		return w
	}
	pending := func(w wakeups) string {
		select {
		case msg := <-w.C():
			return msg
		default:
			return ""
		}
	}
	reader, writer := listen(ModeRead), listen(ModeWrite)
	sub.deliver(k.channel, hintDrained)
	if got := pending(reader); got != "" {
		t.Errorf("a waiting reader heard %q when the last reader left, want nothing", got)
	}
	if got := pending(writer); got != hintDrained {
		t.Errorf("a waiting writer heard %q when the last reader left, want %q", got, hintDrained)
	}
	sub.deliver(k.channel, hintReleased)
	for _, w := range []struct {
		name string
		w    wakeups
	}{{"reader", reader}, {"writer", writer}} {
		if got := pending(w.w); got != hintReleased {
			t.Errorf("a waiting %s heard %q when the writer left, want %q", w.name, got, hintReleased)
		}
	}
}

// heardOn is the next message on c; a minute without one fails t (a hang
// guard).
func heardOn(t *testing.T, c <-chan string) string {
	t.Helper()
	select {
	case msg := <-c:
		return msg
	case <-time.After(time.Minute):
		t.Fatal("no message within a minute")
		return ""
	}
}

// testSubscriber is a subscriber on a miniredis of its own, closed with t.
func testSubscriber(t *testing.T) *subscriber {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	sub := newSubscriber(rdb, false, time.Second, time.Minute, newMetrics(prometheus.NewRegistry()))
	t.Cleanup(func() { _ = sub.close() })
	return sub
}
