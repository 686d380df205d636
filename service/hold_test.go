package service_test

import (
	"fmt"
	"testing"

	"github.com/latchkey/latchkey/service"
)

// TestHoldOutcome: what one renewal of a hold's lease means for the hold.
// A lease found gone or already taken by a waiter after the owner's release
// ends the hold as released; after a force-release, or once its TTL ran out
// unrenewed, as lost.
func TestHoldOutcome(t *testing.T) {
	storeDown := fmt.Errorf("renew: %w", service.ErrUnavailable)
	tests := []struct {
		desc       string
		err        error
		hint       string
		recorded   string
		expired    bool
		wantKind   service.HoldEventKind
		wantReason string
	}{
		{"renewed", nil, "", "", false, service.HoldRenewed, ""},
		{"renewed on a shortened hint", nil, service.HintShortened, "", false, service.HoldRenewed, ""},
		{"released, lock free", service.ErrNotFound, service.HintReleased, "", false, service.HoldReleased, ""},
		{"released, a waiter took the lock", service.ErrNotOwner, service.HintReleased, "", false, service.HoldReleased, ""},
		{"force-released, lock free", service.ErrNotFound, service.HintForced, "force_released", false, service.HoldLost, service.LostForceReleased},
		{"force-released, a waiter took the lock", service.ErrNotOwner, service.HintForced, "force_released", false, service.HoldLost, service.LostForceReleased},
		{"force-released, reason unread", service.ErrNotOwner, service.HintForced, "", false, service.HoldLost, service.LostForceReleased},
		{"force-released, hint missed", service.ErrNotOwner, "", "force_released", false, service.HoldLost, service.LostForceReleased},
		{"expired, then another holder released", service.ErrNotOwner, service.HintReleased, "", true, service.HoldLost, service.LostExpired},
		{"expired, then released by another holder", service.ErrNotFound, service.HintReleased, "", true, service.HoldLost, service.LostExpired},
		{"gone on the timer", service.ErrNotFound, "", "", false, service.HoldLost, service.LostExpired},
		{"taken on the timer", service.ErrNotOwner, "", "", false, service.HoldLost, service.LostExpired},
		{"gone after a shortened hint", service.ErrNotFound, service.HintShortened, "", false, service.HoldLost, service.LostExpired},
		{"store down, within the TTL", storeDown, "", "", false, "", ""},
		{"store down past the TTL", storeDown, "", "", true, service.HoldLost, service.LostExpired},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			kind, reason := service.HoldOutcome(tt.err, tt.hint, tt.recorded, tt.expired)
			if kind != tt.wantKind || reason != tt.wantReason {
				t.Errorf("holdOutcome(%v, %q, %q, %v) = %q %q, want %q %q", tt.err, tt.hint, tt.recorded, tt.expired,
					kind, reason, tt.wantKind, tt.wantReason)
			}
		})
	}
}
