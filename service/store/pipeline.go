package store

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// PipelinedClient is a Client that sends script calls (EVALSHA) of
// concurrent requests to Redis together, as pipelines, through go-redis's
// autopipeliner: under load many requests share one round trip instead of
// paying one each. Everything else (SCRIPT LOAD, PING, pub/sub) goes through
// the plain client.
//
// It wraps one node's client only; on a Redis Cluster ClusterPipelinedClient
// keeps one autopipeliner per primary (go-redis's cluster pipelines send the
// commands of a broken connection again, and the lock scripts are not
// idempotent). Scripts that are safe to send twice go in per-primary
// pipelines through RunPipelined.
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
	return submitEvalSha(ctx, p.ap, sha, keys, args)
}

// submitEvalSha queues an EVALSHA on ap and waits for its reply or for ctx
// to end, whichever comes first.
func submitEvalSha(ctx context.Context, ap *redis.AutoPipeliner, sha string, keys []string, args []any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", sha, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if err := ap.Submit(ctx, cmd).WaitContext(ctx); err != nil && ctx.Err() != nil {
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

// Call is one script call of RunPipelined.
type Call struct {
	Script *Script
	Keys   []string
	Args   []any
}

// pipeliner is a client that sends several commands in one round trip:
// *redis.Client, and a cluster client (RunPipelined uses its primaries').
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// CanPipeline reports whether RunPipelined sends its calls together.
func (s *Store) CanPipeline() bool {
	_, ok := s.rdb.(pipeliner)
	return ok
}

// RunPipelined runs calls in one pipeline. On a cluster client it sends one
// pipeline per primary (the primary of each call's first key) on that
// primary's own client, all at once, so a primary that failed holds up only
// its own calls, and a redirect (MOVED, ASK: the slot is served elsewhere)
// comes back as its call's error rather than being followed; a pipeline
// that could not connect to its primary (a failover the client's view has
// not caught up with) is sent again, once, where the reloaded view names
// its calls' primaries, as Run's call is. It returns
// each call's reply or error, translated by Err as Run's; one call's error
// (a script error, a node that failed) leaves the others' replies alone. A
// call answered NOSCRIPT is run again on its own with Run, which loads the
// script. Each pipeline is bounded by the Redis timeout, as one Run. A
// client that cannot pipeline (CanPipeline) runs the calls one at a time
// with Run.
//
// Give it only scripts that are safe to run twice: a pipeline whose
// connection broke may have run, and its caller may send it again.
func (s *Store) RunPipelined(ctx context.Context, calls []Call) ([]any, []error) {
	res, errs := make([]any, len(calls)), make([]error, len(calls))
	if cc, ok := s.rdb.(clusterClient); ok {
		all := make([]int, len(calls))
		for i := range all {
			all[i] = i
		}
		s.pipelinePerPrimary(ctx, cc, calls, all, true, res, errs)
		return res, errs
	}
	p, ok := s.rdb.(pipeliner)
	if !ok {
		for i, c := range calls {
			res[i], errs[i] = s.Run(ctx, c.Script, c.Keys, c.Args...)
		}
		return res, errs
	}
	which := make([]int, len(calls))
	for i := range which {
		which[i] = i
	}
	if err := s.pipeline(ctx, p, calls, which, res, errs); err != nil {
		for i, c := range calls {
			errs[i] = s.Err(ctx, c.Script.name, err)
		}
	}
	return res, errs
}

// pipelinePerPrimary sends calls[i] for each i of which in one pipeline per
// primary (the primary of each call's first key) and sets res[i] and
// errs[i]. With reroute set, the calls of a pipeline that could not connect
// to its primary (a dial error: nothing was sent) are sent again, once, when
// the cluster client's reloaded view names another primary for them (see
// rerouted): a batch sent right after a failover goes to the promoted
// replica rather than failing on the dead primary, as Run's call does.
func (s *Store) pipelinePerPrimary(ctx context.Context, cc clusterClient, calls []Call, which []int, reroute bool, res []any, errs []error) {
	nodes := map[*redis.Client][]int{}
	for _, i := range which {
		c := calls[i]
		node, err := cc.MasterForKey(ctx, c.Keys[0])
		if err != nil {
			errs[i] = s.Err(ctx, c.Script.name, err)
			continue
		}
		nodes[node] = append(nodes[node], i)
	}
	var wg sync.WaitGroup
	for node, which := range nodes {
		wg.Go(func() {
			err := s.pipeline(ctx, node, calls, which, res, errs)
			if err == nil {
				return
			}
			if reroute && movedFrom(ctx, cc, node, calls[which[0]].Keys[0]) {
				s.pipelinePerPrimary(ctx, cc, calls, which, false, res, errs)
				return
			}
			for _, i := range which {
				errs[i] = s.Err(ctx, calls[i].Script.name, err)
			}
		})
	}
	wg.Wait()
}

// pipeline sends calls[i] for each i of which in one pipeline on p and sets
// res[i] and errs[i] (see RunPipelined), but when it could not connect (a
// dial error: no call was sent): then it sets neither and returns the error.
func (s *Store) pipeline(ctx context.Context, p pipeliner, calls []Call, which []int, res []any, errs []error) error {
	if len(which) == 0 {
		return nil
	}
	opCtx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	pipe := p.Pipeline()
	cmds := make([]*redis.Cmd, len(which))
	for j, i := range which {
		c := calls[i]
		cmds[j] = pipe.EvalSha(opCtx, s.variant(c.Script).sha, c.Keys, c.Args...)
	}
	if _, err := pipe.Exec(opCtx); isDialError(err) {
		return err // nothing sent; the caller sets each call's error
	}
	// Each command carries its own error.
	for j, cmd := range cmds {
		i := which[j]
		c := calls[i]
		switch r, err := cmd.Result(); {
		case err == nil:
			res[i] = r
		case isNoScript(err): // Run loads it, and counts the reload
			res[i], errs[i] = s.Run(ctx, c.Script, c.Keys, c.Args...)
		default:
			errs[i] = s.Err(ctx, c.Script.name, err)
		}
	}
	return nil
}
