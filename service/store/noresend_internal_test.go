package store

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A cluster's node clients turn a connection that failed after a command
// was written into an error go-redis does not retry; failures before the
// write, and Redis's replies, pass as they are.
func TestNoResendStopsRetriesOfSentCommands(t *testing.T) {
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tt := range []struct {
		err  error
		sent bool
	}{
		{io.EOF, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{dialErr, false},
		{redis.ErrPoolTimeout, false},
		{context.DeadlineExceeded, false},
	} {
		hook := NoResend{}.ProcessHook(func(context.Context, redis.Cmder) error { return tt.err })
		cmd := redis.NewCmd(t.Context(), "evalsha", "x", 0)
		err := hook(t.Context(), cmd)
		var sent *sentError
		if errors.As(err, &sent) != tt.sent || (tt.sent && (errors.Is(err, io.EOF) || cmd.Err() != err)) {
			t.Errorf("%v: hook returned %v (cmd %v), want sent %v", tt.err, err, cmd.Err(), tt.sent)
		}
		if !tt.sent && err != tt.err {
			t.Errorf("%v: hook returned %v, want it unchanged", tt.err, err)
		}
	}
}
