package locks_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/latchkey/latchkey/internal/storetest"
	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
	"github.com/redis/go-redis/v9"
)

// TestHoldOutcome: what one renewal of a hold's lease means for the hold.
// A lease found gone or already taken by a waiter after the owner's release
// ends the hold as released; after a force-release, or once its TTL ran out
// unrenewed, as lost.
func TestHoldOutcome(t *testing.T) {
	storeDown := fmt.Errorf("renew: %w", store.ErrUnavailable)
	tests := []struct {
		desc       string
		err        error
		hint       string
		recorded   string
		expired    bool
		wantKind   locks.HoldEventKind
		wantReason string
	}{
		{"renewed", nil, "", "", false, locks.HoldRenewed, ""},
		{"renewed on a shortened hint", nil, locks.HintShortened, "", false, locks.HoldRenewed, ""},
		{"released, lock free", store.ErrNotFound, locks.HintReleased, "", false, locks.HoldReleased, ""},
		{"released, a waiter took the lock", locks.ErrNotOwner, locks.HintReleased, "", false, locks.HoldReleased, ""},
		{"force-released, lock free", store.ErrNotFound, locks.HintForced, "force_released", false, locks.HoldLost, locks.LostForceReleased},
		{"force-released, a waiter took the lock", locks.ErrNotOwner, locks.HintForced, "force_released", false, locks.HoldLost, locks.LostForceReleased},
		{"force-released, reason unread", locks.ErrNotOwner, locks.HintForced, "", false, locks.HoldLost, locks.LostForceReleased},
		{"force-released, hint missed", locks.ErrNotOwner, "", "force_released", false, locks.HoldLost, locks.LostForceReleased},
		{"expired, then another holder released", locks.ErrNotOwner, locks.HintReleased, "", true, locks.HoldLost, locks.LostExpired},
		{"expired, then released by another holder", store.ErrNotFound, locks.HintReleased, "", true, locks.HoldLost, locks.LostExpired},
		{"gone on the timer", store.ErrNotFound, "", "", false, locks.HoldLost, locks.LostExpired},
		{"taken on the timer", locks.ErrNotOwner, "", "", false, locks.HoldLost, locks.LostExpired},
		{"gone after a shortened hint", store.ErrNotFound, locks.HintShortened, "", false, locks.HoldLost, locks.LostExpired},
		{"store down, within the TTL", storeDown, "", "", false, "", ""},
		{"store down past the TTL", storeDown, "", "", true, locks.HoldLost, locks.LostExpired},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			kind, reason := locks.HoldOutcome(tt.err, tt.hint, tt.recorded, tt.expired)
			if kind != tt.wantKind || reason != tt.wantReason {
				t.Errorf("holdOutcome(%v, %q, %q, %v) = %q %q, want %q %q", tt.err, tt.hint, tt.recorded, tt.expired,
					kind, reason, tt.wantKind, tt.wantReason)
			}
		})
	}
}

// slowSubscribe is a client whose pub/sub connection goes to a server that
// never answers, so no subscription is ever confirmed, and whose Subscribe
// first moves the store's clock on by pass: the time a hold spends waiting
// for the confirmation, as the store sees it.
type slowSubscribe struct {
	store.Client
	silent *redis.Client
	m      *miniredis.Miniredis
	now    *time.Time
	pass   time.Duration
}

func (c *slowSubscribe) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	advance(c.m, c.now, c.pass)
	return c.silent.Subscribe(ctx, channels...)
}

// A hold whose subscription is not confirmed within the Redis timeout does
// not hand out its lease as it was granted: a third of the TTL or more has
// passed, so it renews the lease first and reports the renewed one; and when
// the lease ran out meanwhile it gives it back and fails, never reporting
// a lease whose expires_at has passed.
func TestHoldRenewsOrFailsWhenItsSubscriptionIsSlow(t *testing.T) {
	const ttl = 600 * time.Millisecond // the wait (OpTimeout) is over a third of it
	for _, tt := range []struct {
		desc  string
		pass  time.Duration // store time passing while the hold waits
		lapse bool
	}{
		{"renewed", ttl / 2, false},
		{"lapsed", ttl + time.Millisecond, true},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			m, rdb := newTestRedis(t)
			now := t0
			silent := redis.NewClient(&redis.Options{Addr: storetest.SilentRedis(t), MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = silent.Close() })
			c := &slowSubscribe{Client: rdb, silent: silent, m: m, now: &now, pass: tt.pass}
			svc := mustNew(t, c, locks.Config{}, store.Config{OpTimeout: 300 * time.Millisecond})
			t.Cleanup(func() { _ = svc.Close() })
			h, err := svc.Hold(t.Context(), "orders", locks.AcquireRequest{TTL: ttl})
			if tt.lapse {
				if !errors.Is(err, locks.ErrHoldLapsed) || !errors.Is(err, store.ErrUnavailable) {
					t.Fatalf("Hold of a lease that ran out while subscribing = %v, want ErrHoldLapsed", err)
				}
				if _, err := svc.Acquire(t.Context(), "orders", locks.AcquireRequest{TTL: ttl}); err != nil {
					t.Errorf("Acquire after the failed hold = %v, want the lock free", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Hold = %v", err)
			}
			t.Cleanup(func() { _, _ = h.Close(context.Background()) })
			if got, want := h.Lease().ExpiresAt, now.Add(ttl); !got.Equal(want) {
				t.Errorf("held lease expires at %v, want %v: renewed after the wait (granted at %v)", got, want, t0)
			}
		})
	}
}
