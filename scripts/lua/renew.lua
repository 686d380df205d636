-- renew: extend the TTL of a lease held by the given token. On a keep-alive
-- lease this is also the holder's heartbeat, and the TTL never reaches past
-- the lease's max-hold deadline.
--
-- KEYS[1]  lock hash (fields: see acquire.lua)
-- KEYS[2]  lost-lease reasons of this lock (hash: token -> reason)
-- ARGV[1]  token (base64url)
-- ARGV[2]  new lease TTL in milliseconds; 0 renews for the lease's own TTL
-- ARGV[3]  how long lost-lease reasons are kept, in milliseconds
--
-- Reply: {status, hold_count, fence, ttl_ms, now_ms}
--   status 1 = renewed, -1 = no such lease (expired or released),
--   -2 = held by another token
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('HMGET', KEYS[1], 't', 'n', 'f', 'l', 'ku')
if not v[1] then
  return {-1, 0, 0, 0, now_ms}
end
if v[1] ~= ARGV[1] then
  return {-2, 0, 0, 0, now_ms}
end
local ttl = tonumber(ARGV[2])
if ttl <= 0 then
  ttl = tonumber(v[4])
else
  redis.call('HSET', KEYS[1], 'l', ttl)
end
local untl = tonumber(v[5])
if untl then
  -- keep-alive: a heartbeat; the renewer resumes if it had stopped
  redis.call('HSET', KEYS[1], 'kb', now_ms)
  if redis.call('HGET', KEYS[2], ARGV[1]) == 'heartbeat_missed' then
    redis.call('HDEL', KEYS[2], ARGV[1])
  end
  if untl - now_ms < ttl then
    ttl = math.max(untl - now_ms, 1)
    redis.call('HSET', KEYS[2], ARGV[1], 'max_hold')
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
end
redis.call('PEXPIRE', KEYS[1], ttl)
return {1, tonumber(v[2]), tonumber(v[3]), ttl, now_ms}
