-- sem_renew: extend the TTL of a semaphore lease. On a keep-alive lease this
-- is also the holder's heartbeat, and the TTL never reaches past the lease's
-- max-hold deadline.
--
-- KEYS[1]  capacity hash (fields: see sem_acquire.lua); kept after a
--          renewal, as after a grant, for at least the lease's span and the
--          fence retention, and KEYS[2], KEYS[3] for the span
-- KEYS[2]  holders zset: token -> the lease's expiry (ms)
-- KEYS[3]  leases hash: token -> "count:fence:ttl_ms:ku:kh:kb:owner"
-- KEYS[4]  keep-alive registry (zset: member -> next renewal due, ms)
-- KEYS[5]  lost-lease reasons of this semaphore (hash: token -> reason)
-- KEYS[6]  pub/sub channel that waiters and hold streams listen on
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
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tok = ARGV[1]
local expiry = tonumber(redis.call('ZSCORE', KEYS[2], tok))
local v = redis.call('HGET', KEYS[3], tok)
if not v or not expiry or expiry <= now_ms then
  return {-1, 0, 0, 0, now_ms, 0, 0}
end
local count, fence, own, untl, hb, kb, owner =
  string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+):(.*)$')
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
  pttl = heartbeat(KEYS[5], tok, ARGV[3], untl, ttl, now_ms, fence, owner)
  if changed then
    -- the next renewal was due on the old TTL's schedule
    redis.call('ZADD', KEYS[4], math.min(now_ms + math.max(math.floor(ttl / 3), 1), untl), ARGV[4])
  end
end
if now_ms + pttl < expiry then
  redis.call('PUBLISH', KEYS[6], 'shortened')
end
redis.call('HSET', KEYS[3], tok, table.concat({count, fence, own, untl, hb, kb, owner}, ':'))
redis.call('ZADD', KEYS[2], now_ms + pttl, tok)
local span = math.max(pttl, untl - now_ms)
for i, ms in ipairs({span + tonumber(ARGV[5]), span, span}) do
  if redis.call('PTTL', KEYS[i]) < ms then
    redis.call('PEXPIRE', KEYS[i], ms)
  end
end
return {1, tonumber(count), tonumber(fence), pttl, now_ms, untl, hb}
