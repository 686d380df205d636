-- sem_renew_batch: renew a batch of keep-alive semaphore leases in one call,
-- as renew_batch.lua does for locks: each entry is checked atomically
-- against the registry (still due), the lease (still held by the token,
-- not past its expiry) and its bounds, so a renewal never revives a lease
-- that was released, force-released or has expired, nor extends one past
-- its max-hold deadline. A lease past that deadline is removed, and its
-- permits are free at once.
--
-- KEYS[1]      keep-alive registry (zset: member -> next renewal due, ms)
-- KEYS[2i]     leases hash of entry i's semaphore (see lib/sem.lua)
-- KEYS[2i+1]   lost-lease reasons of entry i's semaphore (hash: token -> reason)
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
--#include lib/sem.lua

return renew_entries(function(i, m)
  local leases, lost = KEYS[2 * i], KEYS[2 * i + 1]
  local tok = string.match(m, '^[a-z]+/([^:]+):')
  local r = redis.call('HMGET', leases, '#u', tok, '#e')
  if not r[1] and r[2] and sem_scan().upgrade(leases, now_ms) then
    r = redis.call('HMGET', leases, '#u', tok, '#e') -- a legacy hash, rewritten
  end
  local count, expiry, fence, own, untl, hb, kb, owner = sem_lease(r[2])
  expiry = tonumber(expiry)
  if not count or expiry <= now_ms or now_ms >= tonumber(untl) then
    local reason = redis.call('HGET', lost, tok) or 'expired'
    if count and expiry > now_ms then
      reason = 'max_hold'
    end
    if count then
      -- the lease is over: its permits are free
      local u = (tonumber(r[1]) or 0) - tonumber(count)
      if u <= 0 then
        redis.call('DEL', leases)
      else
        redis.call('HDEL', leases, tok)
        redis.call('HSET', leases, '#u', u)
      end
    end
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
  local ends = now_ms + pttl
  redis.call('HSET', leases, tok, table.concat({count, ends, fence, own, untl, hb, kb, owner}, ':'),
    '#e', math.min(tonumber(r[3]) or ends, ends))
  redis.call('ZADD', KEYS[1], nxt, m)
  return 1, reason
end)
