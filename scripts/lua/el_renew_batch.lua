-- el_renew_batch: renew a batch of keep-alive election leases in one call,
-- as renew_batch.lua does for locks (the leadership hash has a lock's fields
-- but the hold count, which a batch renewal does not read). Each entry is
-- checked atomically against the registry (still due: an entry another
-- instance renewed first, or that release removed, is skipped), the owner's
-- token and the lease's bounds, so a renewal can never revive a lease that
-- was released, force-released or has expired, nor extend one past its
-- max-hold deadline.
--
-- KEYS[1]      keep-alive registry (zset: "el/<token>:<name>" -> next renewal due, ms)
-- KEYS[2i]     leadership hash of entry i (fields: see el_acquire.lua)
-- KEYS[2i+1]   lost-lease reasons of entry i's election (hash: token -> reason)
-- ARGV[1]      how long lost-lease reasons are kept, in milliseconds
-- ARGV[1+i]    registry member of entry i ("el/<token>:<name>")
--
-- Reply: {now_ms, code1, lag1_ms, reason1, code2, lag2_ms, reason2, ...,
--         next_due_ms}
--   code 0 = skipped (no longer due or no longer registered)
--        1 = renewed (reason "max_hold" when this renewal runs to the deadline)
--        2 = not renewed: heartbeat missed, the lease runs out its TTL
--        3 = lost: the lease is gone or taken over; reason says why
--            (expired, force_released, max_hold, heartbeat_missed)
--        4 = dropped: the lease is no longer kept alive (nothing was lost),
--            or its key is not a lock hash
--   lag is how late the entry was visited (now - due); next_due_ms is when
--   the registry's first entry is due after this batch (-1: it is empty).
-- On Redis Cluster the registry is the shard of one hash slot, and a batch
-- names its entries only, whose elections share that slot.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
--#include lib/lost.lua
--#include lib/keepalive.lua

local function member_token(m)
  return string.match(m, '^[a-z]+/([^:]+):')
end
--#include lib/lease_renew_batch.lua
