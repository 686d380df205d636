package store

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ClusterPipelinedClient is a cluster Client that sends the script calls
// (EVALSHA) of concurrent requests to each primary together, as
// PipelinedClient does on one node: each call goes on the autopipeliner of
// the primary the cluster client's view names for its first key, so under
// load the calls to one primary share round trips instead of paying one
// each. Everything else (SCRIPT LOAD, pub/sub, the primaries' walks) goes
// through the cluster client.
//
// A call answered MOVED or ASK (the slot is served elsewhere now: nothing
// ran) is sent again through the cluster client, which follows the
// redirect; a call that could not be queued (the node's client was closed
// as the view changed) goes through the cluster client too. A pipeline
// whose connection broke is not sent again (the node clients have
// MaxRetries -1 and the NoResend hook, as cmd/server makes them): the lock
// scripts are not idempotent.
type ClusterPipelinedClient struct {
	*redis.ClusterClient
	maxQueued int
	// masterFor names the primary a call is queued for: the cluster
	// client's MasterForKey (tests name another).
	masterFor func(ctx context.Context, key string) (*redis.Client, error)

	mu  sync.Mutex
	aps map[*redis.Client]*redis.AutoPipeliner // by primary's node client
}

// NewClusterPipelinedClient wraps cc. maxQueued bounds the commands waiting
// for a pipeline on each primary (0: go-redis's default). Give cc
// MaxRetries -1 (see NewPipelinedClient).
func NewClusterPipelinedClient(cc *redis.ClusterClient, maxQueued int) *ClusterPipelinedClient {
	return &ClusterPipelinedClient{ClusterClient: cc, maxQueued: maxQueued, masterFor: cc.MasterForKey,
		aps: map[*redis.Client]*redis.AutoPipeliner{}}
}

// EvalSha queues the call on the pipeline of its slot's primary and waits
// for its reply or for ctx to end, whichever comes first.
func (p *ClusterPipelinedClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if len(keys) == 0 {
		return p.ClusterClient.EvalSha(ctx, sha, keys, args...)
	}
	node, err := p.masterFor(ctx, keys[0])
	if err != nil {
		return p.ClusterClient.EvalSha(ctx, sha, keys, args...)
	}
	ap, err := p.pipelinerFor(node)
	if err != nil {
		return p.ClusterClient.EvalSha(ctx, sha, keys, args...)
	}
	cmd := submitEvalSha(ctx, ap, sha, keys, args)
	switch err := cmd.Err(); {
	case errors.Is(err, redis.ErrClosed):
		// The view dropped that node's client before the call was sent.
		p.forget(node)
		return p.ClusterClient.EvalSha(ctx, sha, keys, args...)
	case isRedirect(err):
		return p.ClusterClient.EvalSha(ctx, sha, keys, args...)
	}
	return cmd
}

// Unpipelined returns the cluster client, for callers that batch their
// calls themselves (rate-limit decisions).
func (p *ClusterPipelinedClient) Unpipelined() redis.Scripter { return p.ClusterClient }

// pipelinerFor returns node's autopipeliner, made on first use.
func (p *ClusterPipelinedClient) pipelinerFor(node *redis.Client) (*redis.AutoPipeliner, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ap, ok := p.aps[node]; ok {
		return ap, nil
	}
	opts := redis.DefaultAutoPipelineOptions()
	opts.MaxQueuedCommands = p.maxQueued
	ap, err := node.AsyncAutoPipelineWithOptions(opts)
	if err != nil {
		return nil, err
	}
	p.aps[node] = ap
	return ap, nil
}

// forget drops a node client's autopipeliner once the client is closed.
func (p *ClusterPipelinedClient) forget(node *redis.Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.aps, node)
}
