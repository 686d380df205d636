package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// PipelinedClient is a Client that sends script calls (EVALSHA) of
// concurrent requests to Redis together, as pipelines, through go-redis's
// autopipeliner: under load many requests share one round trip instead of
// paying one each. Everything else (SCRIPT LOAD, PING, pub/sub) goes through
// the plain client.
//
// It wraps one node's client only. On a Redis Cluster the cluster client is
// used as it is: each script goes to its slot's primary on its own, because
// go-redis's cluster pipelines send the commands of a broken connection
// again, and the lock scripts are not idempotent.
//
// Each caller's context is honoured: a caller whose context ends stops
// waiting at once and gets the context's error (its command may still run in
// Redis, as with any timed-out call). Errors reach exactly the commands they
// concern: a script error or a WRONGTYPE is set on its own command, a lost
// connection on the commands of that batch.
type PipelinedClient struct {
	*redis.Client
	ap *redis.AutoPipeliner
}

// NewPipelinedClient wraps rdb. maxQueued bounds the commands waiting for a
// pipeline (0: go-redis's default); past it a call fails at once with an
// error that the service reports as unavailable. Closing rdb stops the
// autopipeliner too.
//
// Give rdb MaxRetries -1: a batch that fails on a network error would
// otherwise be sent again whole, and Latchkey's scripts are not idempotent
// (a reentrant acquire or a release must not run twice).
func NewPipelinedClient(rdb *redis.Client, maxQueued int) (*PipelinedClient, error) {
	opts := redis.DefaultAutoPipelineOptions()
	opts.MaxQueuedCommands = maxQueued
	ap, err := rdb.AsyncAutoPipelineWithOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("autopipeline: %w", err)
	}
	return &PipelinedClient{Client: rdb, ap: ap}, nil
}

// EvalSha queues the call on the shared pipeline and waits for its reply or
// for ctx to end, whichever comes first.
func (p *PipelinedClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", sha, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if err := p.ap.Submit(ctx, cmd).WaitContext(ctx); err != nil && ctx.Err() != nil {
		// The batch may still fill cmd in later: answer with a fresh command.
		out := redis.NewCmd(ctx, cmdArgs...)
		out.SetErr(err)
		return out
	}
	return cmd
}

// Unpipelined returns the plain client, for callers that batch their calls
// themselves (rate-limit decisions): a call they make is written at once on
// a connection of its own instead of waiting for the shared pipeline.
func (p *PipelinedClient) Unpipelined() redis.Scripter { return p.Client }
