package locks_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/latchkey/latchkey/service/locks"
	"github.com/latchkey/latchkey/service/store"
)

func TestErrorsWrapTheirSentinel(t *testing.T) {
	sentinels := []error{store.ErrInvalid, store.ErrNotFound, store.ErrConflict, store.ErrUnavailable}
	// Each message is prefixed by the package that says it: the store's
	// sentinels and errors by the store's prefix, the lock service's own by
	// "locks: ".
	storePrefix := strings.SplitAfter(store.ErrInvalid.Error(), ": ")[0]
	tests := []struct {
		err    error
		want   error
		prefix string
	}{
		{&store.ValidationError{Field: "ttl", Rule: "min", Detail: "too short"}, store.ErrInvalid, storePrefix},
		{&locks.HeldError{Name: "a"}, store.ErrConflict, "locks: "},
		{&locks.ModeError{Name: "a", Fair: true}, store.ErrConflict, "locks: "},
		{&locks.UpgradeError{Name: "a"}, store.ErrConflict, "locks: "},
		{&locks.PermitsMismatchError{Name: "a", Permits: 2}, store.ErrConflict, "locks: "},
		{&locks.PermitsUnavailableError{Name: "a"}, store.ErrConflict, "locks: "},
		{locks.ErrNotOwner, store.ErrConflict, storePrefix},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			for _, s := range sentinels {
				if got, want := errors.Is(tt.err, s), s == tt.want; got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", tt.err, s, got, want)
				}
			}
			if !strings.HasPrefix(tt.err.Error(), tt.prefix) {
				t.Errorf("message %q lacks the %q prefix", tt.err, tt.prefix)
			}
		})
	}
}

func TestValidationErrorMessageNamesTheField(t *testing.T) {
	err := error(&store.ValidationError{Field: "ttl", Rule: "max", Detail: "ttl must be at most 1h0m0s"})
	if got, want := err.Error(), "store: invalid ttl: ttl must be at most 1h0m0s"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
