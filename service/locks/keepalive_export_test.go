package locks

import (
	"context"
	"time"
)

// RenewDueNow runs the renewer once: every due keep-alive lease is renewed
// (or found lost) before it returns, unless a call fails. It returns how long
// the renewer would sleep before looking again. Tests drive time with
// miniredis.
func RenewDueNow(ctx context.Context, s *Service) time.Duration { return s.renewDue(ctx) }

// RenewShardsNow runs the cluster renewer once (see RenewDueNow): every due
// shard of the directory is visited and settled before it returns, unless a
// call fails.
func RenewShardsNow(ctx context.Context, s *Service) time.Duration { return s.renewShards(ctx) }

// DirKeys names the directory of the registry shards under prefix.
func DirKeys(prefix string) (due, gens string) { return dirKeys(prefix) }

// ShardPattern is the SCAN pattern of the registry shards under prefix.
func ShardPattern(prefix string) string { return shardPattern(prefix) }

// ShardSlot reports the slot of a registry shard key under prefix.
func ShardSlot(prefix, key string) (int, bool) { return shardSlot(prefix, key) }

// ClaimShards runs the cluster renewer's claim of up to limit due slots and
// returns the slots claimed, as an instance that stops before it settles
// them leaves them.
func ClaimShards(ctx context.Context, s *Service, limit int) ([]int, error) {
	c, err := s.claimShards(ctx, limit)
	return c.slots, err
}

// WaitReconciled waits until the cluster renewer's reconciliation in
// flight, if any, has ended.
func WaitReconciled(s *Service) { s.dir.reconciled.Wait() }
