-- sem_renew_batch: renew a batch of keep-alive semaphore leases in one call,
-- as renew_batch.lua does for locks: each entry is checked atomically
-- against the registry (still due), the lease (still held by the token,
-- not past its expiry) and its bounds, so a renewal never revives a lease
-- that was released, force-released or has expired, nor extends one past
-- its max-hold deadline. A lease past that deadline is removed, and its
-- permits are free at once.
--
-- KEYS[1]      keep-alive registry (zset: member -> next renewal due, ms)
-- KEYS[3i-1]   holders zset of entry i's semaphore (token -> expiry, ms)
-- KEYS[3i]     leases hash of entry i's semaphore (see sem_acquire.lua)
-- KEYS[3i+1]   lost-lease reasons of entry i's semaphore (hash: token -> reason)
-- ARGV[1]      how long lost-lease reasons are kept, in milliseconds
-- ARGV[1+i]    registry member of entry i ("sem/<token>:<name>")
--
-- Reply: {now_ms, code1, lag1_ms, reason1, code2, lag2_ms, reason2, ...,
--         next_due_ms}
--   codes, lags, reasons and next_due_ms as renew_batch.lua's: 0 skipped, 1 renewed,
--   2 heartbeat missed, 3 lost (reason says why), 4 dropped.
-- On Redis Cluster the registry is the shard of one hash slot, and a batch
-- names its entries only, whose semaphores share that slot.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
--#include lib/lost.lua
--#include lib/keepalive.lua

return renew_entries(function(i, m)
  local holders, leases, lost = KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1]
  local tok = string.match(m, '^[a-z]+/([^:]+):')
  local expiry = tonumber(redis.call('ZSCORE', holders, tok))
  local v = redis.call('HGET', leases, tok)
  local count, fence, own, untl, hb, kb, owner
  if v then
    count, fence, own, untl, hb, kb, owner = string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+):(.*)$')
  end
  if not v or not expiry or expiry <= now_ms or not untl or now_ms >= tonumber(untl) then
    local reason = redis.call('HGET', lost, tok) or 'expired'
    if v and expiry and expiry > now_ms then
      reason = 'max_hold'
    end
    -- the lease is over: its permits are free
    redis.call('ZREM', holders, tok)
    redis.call('HDEL', leases, tok)
    local at = now_ms
    if reason == 'max_hold' then at = tonumber(untl) elseif expiry and expiry <= now_ms then at = expiry end
    lose(lost, tok, reason, at, fence, owner)
    redis.call('ZREM', KEYS[1], m)
    return 3, reason
  elseif tonumber(untl) == 0 then
    redis.call('ZREM', KEYS[1], m)
    return 4, ''
  elseif tonumber(hb) > 0 and now_ms - tonumber(kb) > tonumber(hb) then
    lose(lost, tok, 'heartbeat_missed', expiry, fence, owner)
    redis.call('ZADD', KEYS[1], expiry, m)
    return 2, 'heartbeat_missed'
  end
  local pttl, nxt, reason = next_renewal(lost, tok, tonumber(own), tonumber(untl), fence, owner)
  redis.call('ZADD', holders, now_ms + pttl, tok)
  redis.call('ZADD', KEYS[1], nxt, m)
  return 1, reason
end)
