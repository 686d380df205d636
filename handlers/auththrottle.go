package handlers

import (
	"sync"
	"time"
)

// maxThrottled bounds the client addresses the throttle remembers; past
// it, addresses that have earned their whole burst back are forgotten, and
// if none has, all are.
const maxThrottled = 100_000

// failThrottle throttles failed authentication per client address: a
// token bucket of burst failures per address, refilled over window. An
// address whose bucket is empty is throttled (every request it makes is
// refused, with or without a valid key) until a token is back. It is kept
// in this process: each instance throttles what it sees.
type failThrottle struct {
	burst  float64
	refill time.Duration // per token
	now    func() time.Time

	mu sync.Mutex
	m  map[string]*failBucket
}

type failBucket struct {
	tokens float64
	at     time.Time
}

func newFailThrottle(burst int, window time.Duration, now func() time.Time) *failThrottle {
	return &failThrottle{burst: float64(burst), refill: window / time.Duration(burst), now: now, m: map[string]*failBucket{}}
}

// level refills b up to now and returns its tokens. Callers hold t.mu.
func (t *failThrottle) level(b *failBucket, now time.Time) float64 {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(t.burst, b.tokens+float64(d)/float64(t.refill))
		b.at = now
	}
	return b.tokens
}

// throttled reports whether client may not try now, and until when.
func (t *failThrottle) throttled(client string) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.m[client]
	if b == nil {
		return 0, false
	}
	if n := t.level(b, t.now()); n < 1 {
		return time.Duration((1 - n) * float64(t.refill)), true
	}
	return 0, false
}

// fail counts one failed authentication of client.
func (t *failThrottle) fail(client string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	b := t.m[client]
	if b == nil {
		if len(t.m) >= maxThrottled {
			t.forget(now)
		}
		b = &failBucket{tokens: t.burst, at: now}
		t.m[client] = b
	}
	t.level(b, now)
	b.tokens = max(b.tokens-1, 0)
}

// forget drops the addresses with a full bucket, or all of them when none
// has one. Callers hold t.mu.
func (t *failThrottle) forget(now time.Time) {
	for k, b := range t.m {
		if t.level(b, now) >= t.burst {
			delete(t.m, k)
		}
	}
	if len(t.m) >= maxThrottled {
		clear(t.m)
	}
}
