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

return renew_entries(function(i, m)
  local lock, lost = KEYS[2 * i], KEYS[2 * i + 1]
  local tok = string.match(m, '^[a-z]+/([^:]+):')
  local v = redis.pcall('HMGET', lock, 't', 'l', 'ku', 'kh', 'kb', 'f', 'o')
  if type(v) ~= 'table' or v.err then
    -- not a lock hash (written by something else): drop the entry rather
    -- than fail the whole batch on it, every time
    redis.call('ZREM', KEYS[1], m)
    return 4, ''
  end
  local untl = tonumber(v[3])
  if v[1] ~= tok then
    -- gone or taken over: when, fence and owner are the record's, if any
    local reason = redis.call('HGET', lost, tok) or 'expired'
    lose(lost, tok, reason, now_ms)
    redis.call('ZREM', KEYS[1], m)
    return 3, reason
  elseif not untl then
    redis.call('ZREM', KEYS[1], m)
    return 4, ''
  elseif now_ms >= untl then
    redis.call('DEL', lock)
    lose(lost, tok, 'max_hold', untl, v[6], v[7])
    redis.call('ZREM', KEYS[1], m)
    return 3, 'max_hold'
  end
  local ttl = tonumber(v[2])
  local hb, hb_at = tonumber(v[4]) or 0, tonumber(v[5]) or 0
  if hb > 0 and now_ms - hb_at > hb then
    local ends = now_ms + math.max(redis.call('PTTL', lock), 1)
    lose(lost, tok, 'heartbeat_missed', ends, v[6], v[7])
    redis.call('ZADD', KEYS[1], ends, m)
    return 2, 'heartbeat_missed'
  end
  local pttl, nxt, reason = next_renewal(lost, tok, ttl, untl, v[6], v[7])
  -- the stored TTL's own string when it is the TTL: see acquire.lua
  if pttl == ttl and string.find(v[2], '^%d+$') then
    pttl = v[2]
  end
  redis.call('PEXPIRE', lock, pttl)
  redis.call('ZADD', KEYS[1], nxt, m)
  return 1, reason
end)
