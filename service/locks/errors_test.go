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
	tests := []struct {
		err  error
		want error
	}{
		{&store.ValidationError{Field: "ttl", Rule: "min", Detail: "too short"}, store.ErrInvalid},
		{&locks.HeldError{Name: "a"}, store.ErrConflict},
		{locks.ErrNotOwner, store.ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			for _, s := range sentinels {
				if got, want := errors.Is(tt.err, s), s == tt.want; got != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", tt.err, s, got, want)
				}
			}
			if !strings.HasPrefix(tt.err.Error(), "service: ") {
				t.Errorf("message %q lacks the \"service: \" prefix", tt.err)
			}
		})
	}
}

func TestValidationErrorMessageNamesTheField(t *testing.T) {
	err := error(&store.ValidationError{Field: "ttl", Rule: "max", Detail: "ttl must be at most 1h0m0s"})
	if got, want := err.Error(), "service: invalid ttl: ttl must be at most 1h0m0s"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
