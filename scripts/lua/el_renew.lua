-- el_renew: extend the TTL of the leadership lease held by the given token,
-- as renew.lua does for a lock (a leader has no hold count). On a keep-alive
-- lease this is also the holder's heartbeat, and the TTL never reaches past
-- the lease's max-hold deadline.
--
-- KEYS[1]  leadership hash (fields: see el_acquire.lua)
-- KEYS[2]  lost-lease reasons of this lock (hash: token -> reason)
-- KEYS[3]  keep-alive registry (zset: member -> next renewal due, ms)
-- KEYS[4]  pub/sub channel that candidates and hold streams of this election listen on
-- KEYS[5]  fence counter; a renewal keeps it, as a grant does, for the
--          lease's span (its TTL, or until a keep-alive lease's max-hold
--          deadline) and the fence retention after it
-- ARGV[1]  token (base64url)
-- ARGV[2]  new lease TTL in milliseconds; 0 renews for the lease's own TTL
-- ARGV[3]  how long lost-lease reasons are kept, in milliseconds
-- ARGV[4]  keep-alive registry member ("el/<token>:<name>")
-- ARGV[5]  fence retention in milliseconds: how long the counter outlives the lease
--
-- Reply: {status, hold_count, fence, ttl_ms, now_ms, ka_until_ms, ka_heartbeat_ms}
--   status 1 = renewed, -1 = no such lease (expired or released),
--   -2 = held by another token
--   ka_until_ms is 0 when the lease is not kept alive; a keep-alive lease's
--   last heartbeat is now_ms (this renewal).
-- A new TTL that ends the lease sooner than it would have ended publishes
-- "shortened" on the channel: a waiter's re-check and a hold stream's
-- renewals were timed for the old TTL. A new TTL also reschedules the
-- service's renewals of a keep-alive lease (every ttl/3, as acquire.lua).
--#include lib/lost.lua
--#include lib/heartbeat.lua
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- a leadership has no hold count: 'n' is never set, and the reply's is 1
local v = redis.call('HMGET', KEYS[1], 't', 'n', 'f', 'l', 'ku', 'kh', 'o')
if not v[1] then
  return {-1, 0, 0, 0, now_ms, 0, 0}
end
if v[1] ~= ARGV[1] then
  return {-2, 0, 0, 0, now_ms, 0, 0}
end
local ttl = tonumber(ARGV[2])
local changed = false
if ttl <= 0 then
  ttl = tonumber(v[4])
elseif ttl ~= tonumber(v[4]) then
  changed = true
  redis.call('HSET', KEYS[1], 'l', ARGV[2])
end
local pttl = ttl
local untl = tonumber(v[5])
if untl then
  redis.call('HSET', KEYS[1], 'kb', now_ms)
  pttl = heartbeat(KEYS[2], ARGV[1], ARGV[3], untl, ttl, now_ms, v[3], v[7])
  if changed then
    -- the next renewal was due on the old TTL's schedule
    redis.call('ZADD', KEYS[3], math.min(now_ms + math.max(math.floor(ttl / 3), 1), untl), ARGV[4])
  end
end
if changed and pttl < redis.call('PTTL', KEYS[1]) then
  redis.call('PUBLISH', KEYS[4], 'shortened')
end
redis.call('PEXPIRE', KEYS[1], pttl)
redis.call('PEXPIRE', KEYS[5], math.max(pttl, (untl or 0) - now_ms) + tonumber(ARGV[5]))
return {1, 1, tonumber(v[3]), pttl, now_ms, untl or 0, tonumber(v[6]) or 0}
