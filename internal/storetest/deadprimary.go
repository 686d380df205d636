package storetest

import (
	"context"
	"net"
	"sync/atomic"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// DeadPrimary is a cluster client whose view of the slots names a dead
// primary (Dead) for every key until it is reloaded: an EVALSHA before
// then cannot connect (a dial error: nothing sent), and ReloadState brings
// the view up to date. Dials counts the EVALSHAs that met the dead primary.
type DeadPrimary struct {
	*redis.ClusterClient
	Dead     *redis.Client
	Reloaded atomic.Bool
	Dials    atomic.Int64
}

func (c *DeadPrimary) MasterForKey(ctx context.Context, key string) (*redis.Client, error) {
	if !c.Reloaded.Load() {
		return c.Dead, nil
	}
	return c.ClusterClient.MasterForKey(ctx, key)
}

func (c *DeadPrimary) ReloadState(context.Context) { c.Reloaded.Store(true) }

func (c *DeadPrimary) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if !c.Reloaded.Load() {
		c.Dials.Add(1)
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
		return cmd
	}
	return c.ClusterClient.EvalSha(ctx, sha, keys, args...)
}
