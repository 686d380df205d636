package store

import (
	"context"
	"errors"
	"net"

	"github.com/redis/go-redis/v9"
)

// NewClusterNodeClient is the node client of a cluster client
// (redis.ClusterOptions.NewClient): a redis.Client with the NoResend hook.
func NewClusterNodeClient(o *redis.Options) *redis.Client {
	c := redis.NewClient(o)
	c.AddHook(NoResend{})
	return c
}

// NoResend is a hook for every node client of a cluster client (see
// NewClusterNodeClient): a command whose connection broke after it was
// written (it may have run) comes back as an error the cluster client does
// not retry, where it would otherwise send it again; the lock scripts are
// not idempotent. Errors before the
// write (a dial, a pool wait) and Redis's own replies (MOVED, ASK,
// CLUSTERDOWN: the command did not run) are left to the cluster client.
type NoResend struct{}

func (NoResend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (NoResend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (NoResend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil || !mayHaveRun(err) {
			return err
		}
		sent := &sentError{msg: err.Error()}
		cmd.SetErr(sent)
		return sent
	}
}

// mayHaveRun reports an error after which the command may have reached
// Redis and run.
func mayHaveRun(err error) bool {
	var opErr *net.OpError
	switch {
	case IsServerError(err), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed):
		return false
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return false
	}
	return true
}

// sentError is a connection failure after a command was written. It wraps
// nothing on purpose: go-redis retries what unwraps to a network error.
type sentError struct{ msg string }

func (e *sentError) Error() string {
	return "the connection failed after the command was sent (it may have run): " + e.msg
}
