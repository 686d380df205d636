-- sem_renew: extend the TTL of a semaphore lease. On a keep-alive lease this
-- is also the holder's heartbeat, and the TTL never reaches past the lease's
-- max-hold deadline.
--
-- KEYS[1]  capacity hash (fields: see sem_acquire.lua); kept after a
--          renewal, as after a grant, for at least the lease's span and the
--          fence retention, and KEYS[2] for the span (their expiries are
--          recorded in KEYS[2]; the record is read only when KEYS[2] does
--          not say its expiry yet)
-- KEYS[2]  leases hash (see lib/sem.lua)
-- KEYS[3]  keep-alive registry (zset: member -> next renewal due, ms)
-- KEYS[4]  lost-lease reasons of this semaphore (hash: token -> reason)
-- KEYS[5]  pub/sub channel that waiters and hold streams listen on
-- ARGV[1]  token (base64url)
-- ARGV[2]  new lease TTL in milliseconds; 0 renews for the lease's own TTL
-- ARGV[3]  how long lost-lease reasons are kept, in milliseconds
-- ARGV[4]  keep-alive registry member of the lease
-- ARGV[5]  fence retention in milliseconds
--
-- Reply: {status, count, fence, ttl_ms, now_ms, ka_until_ms, ka_heartbeat_ms}
--   status 1 = renewed, -1 = no such lease (expired, released or
--   force-released). ka_until_ms is 0 when the lease is not kept alive.
-- A new TTL that ends the lease sooner publishes "shortened", and a new TTL
-- reschedules the service's renewals of a keep-alive lease (see renew.lua).
--#include lib/lost.lua
--#include lib/heartbeat.lua
--#include lib/sem.lua
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tok = ARGV[1]
local r = redis.call('HMGET', KEYS[2], '#u', tok, '#e', '#x', '#c')
if not r[1] and r[2] and sem_scan().upgrade(KEYS[2], now_ms) then
  r = redis.call('HMGET', KEYS[2], '#u', tok, '#e', '#x', '#c') -- a legacy hash, rewritten
end
local count, expiry, fence, own, untl, hb, kb, owner = sem_lease(r[2])
expiry = tonumber(expiry)
if not count or expiry <= now_ms then
  return {-1, 0, 0, 0, now_ms, 0, 0}
end
untl, hb = tonumber(untl), tonumber(hb)
local ttl = tonumber(ARGV[2])
local changed = ttl > 0 and ttl ~= tonumber(own)
if ttl <= 0 then
  ttl = tonumber(own)
else
  own = ARGV[2]
end
local pttl = ttl
if untl > 0 then
  kb = now_ms
  pttl = heartbeat(KEYS[4], tok, ARGV[3], untl, ttl, now_ms, fence, owner)
  if changed then
    -- the next renewal was due on the old TTL's schedule
    redis.call('ZADD', KEYS[3], math.min(now_ms + math.max(math.floor(ttl / 3), 1), untl), ARGV[4])
  end
end
local ends = now_ms + pttl
if ends < expiry then
  redis.call('PUBLISH', KEYS[5], 'shortened')
end
local span_end = math.max(ends, untl)
local lx, leases_later = sem_until(tonumber(r[4]), span_end, now_ms)
-- the record's expiry as '#c' has it, or, until a grant records it there,
-- as the last layout's x (lib/sem.lua)
local c_at = tonumber(r[5]) or tonumber(redis.call('HGET', KEYS[1], 'x'))
local cx, cap_later = sem_until(c_at, span_end + tonumber(ARGV[5]))
local f = {tok, table.concat({count, ends, fence, own, untl, hb, kb, owner}, ':')}
local e = tonumber(r[3])
if not e or ends < e then
  f[#f + 1] = '#e'
  f[#f + 1] = ends
end
if leases_later then
  f[#f + 1] = '#x'
  f[#f + 1] = lx
end
-- the record's expiry is recorded only when it has one to move
if (cap_later and redis.call('PEXPIRE', KEYS[1], cx - now_ms) == 1) or (not cap_later and not r[5]) then
  f[#f + 1] = '#c'
  f[#f + 1] = cx
end
redis.call('HSET', KEYS[2], unpack(f))
if leases_later then
  redis.call('PEXPIRE', KEYS[2], lx - now_ms)
end
return {1, tonumber(count), tonumber(fence), pttl, now_ms, untl, hb}
