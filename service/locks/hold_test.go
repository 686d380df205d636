package locks_test

import (
	"fmt"
	"testing"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
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
