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

// QuotaReserve takes or keeps one place of a tenant's lease or waiter quota.
//
//go:embed quota_reserve.lua
var QuotaReserve string

// QuotaRelease gives back one place of a tenant's lease or waiter quota.
//
//go:embed quota_release.lua
var QuotaRelease string
