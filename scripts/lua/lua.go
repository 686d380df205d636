// Package lua holds Latchkey's Redis scripts, one file per operation. Each
// file opens with a comment listing its KEYS, ARGV and reply.
package lua

import _ "embed"

// Acquire takes a lock lease or re-enters it with the owning token.
//
//go:embed acquire.lua
var Acquire string

// Release drops one hold of a lease and frees the lock on the last one.
//
//go:embed release.lua
var Release string

// Renew extends the TTL of a lease held by a token.
//
//go:embed renew.lua
var Renew string

// Inspect reads the state of a lock without changing it.
//
//go:embed inspect.lua
var Inspect string

// ForceRelease removes a lease whoever holds it and bumps the fence.
//
//go:embed force_release.lua
var ForceRelease string

// RateLimitFixedWindow is the INCR + EXPIRE fixed-window limiter.
//
//go:embed ratelimit_fixed_window.lua
var RateLimitFixedWindow string

// RateLimitSlidingWindow is the two-counter sliding-window limiter.
//
//go:embed ratelimit_sliding_window.lua
var RateLimitSlidingWindow string

// RateLimitTokenBucket is the GCRA token-bucket limiter.
//
//go:embed ratelimit_token_bucket.lua
var RateLimitTokenBucket string

// Leave removes a waiter that gives up from the waiters and the fair queue.
//
//go:embed leave.lua
var Leave string

// KeepaliveDue lists the keep-alive leases due for renewal.
//
//go:embed keepalive_due.lua
var KeepaliveDue string

// RenewBatch renews a batch of keep-alive leases in one call.
//
//go:embed renew_batch.lua
var RenewBatch string

// RateLimitMulti decides one request under several limits at once: all
// allow and count it, or nothing is counted.
//
//go:embed ratelimit_multi.lua
var RateLimitMulti string

// SemAcquire takes permits of a semaphore as one lease.
//
//go:embed sem_acquire.lua
var SemAcquire string

// SemRelease gives back the permits of a semaphore lease.
//
//go:embed sem_release.lua
var SemRelease string

// SemRenew extends the TTL of a semaphore lease.
//
//go:embed sem_renew.lua
var SemRenew string

// SemInspect reads the state of a semaphore without changing it.
//
//go:embed sem_inspect.lua
var SemInspect string

// SemForceRelease removes every lease of a semaphore and bumps its fence.
//
//go:embed sem_force_release.lua
var SemForceRelease string

// SemSetPermits changes the capacity of a semaphore.
//
//go:embed sem_set_permits.lua
var SemSetPermits string

// SemLeave removes a semaphore waiter that gives up.
//
//go:embed sem_leave.lua
var SemLeave string

// SemRenewBatch renews a batch of keep-alive semaphore leases in one call.
//
//go:embed sem_renew_batch.lua
var SemRenewBatch string

// RWLib holds the helpers every read/write lock script (RW*) runs with:
// each of them is RWLib followed by its own file.
//
//go:embed rw_lib.lua
var RWLib string

// RWAcquire takes a read or write lease of a read/write lock, or re-enters it.
//
//go:embed rw_acquire.lua
var RWAcquire string

// RWRelease drops one hold of a read or write lease.
//
//go:embed rw_release.lua
var RWRelease string

// RWRenew extends a token's leases of a read/write lock.
//
//go:embed rw_renew.lua
var RWRenew string

// RWInspect reads the state of a read/write lock without changing it.
//
//go:embed rw_inspect.lua
var RWInspect string

// RWForceRelease evicts every holder of a read/write lock and bumps its fence.
//
//go:embed rw_force_release.lua
var RWForceRelease string

// RWLeave removes a waiter of a read/write lock that gives up.
//
//go:embed rw_leave.lua
var RWLeave string

// RWRenewBatch renews a batch of keep-alive leases of read/write locks.
//
//go:embed rw_renew_batch.lua
var RWRenewBatch string
