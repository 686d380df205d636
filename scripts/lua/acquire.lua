-- acquire: take a lock lease, or re-enter it with the owning token.
--
-- KEYS[1]  lock hash {token, count, fence, ttl}; its TTL is the lease TTL
-- KEYS[2]  fence counter (string); outlives the lock, refreshed on every grant
-- ARGV[1]  token (base64url)
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  fence counter TTL in milliseconds
--
-- Reply: {status, hold_count, fence, ttl_ms, now_ms}
--   status 1 = new grant, 2 = reentrant grant, 0 = held by another token
--   (then ttl_ms is the holder's remaining TTL and fence the holder's fence).
-- The fence of a new grant is INCR of the counter; a missing counter is
-- seeded from Redis TIME in microseconds, so fences keep increasing after a
-- restart or FLUSHALL that lost the counter.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])

if redis.call('EXISTS', KEYS[1]) == 0 then
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('SET', KEYS[2], t[1] .. string.sub('000000' .. t[2], -6))
  end
  local fence = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'count', 1, 'fence', fence, 'ttl', ttl)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, 1, fence, ttl, now_ms}
end

local v = redis.call('HMGET', KEYS[1], 'token', 'count', 'fence')
if v[1] == ARGV[1] then
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  redis.call('HSET', KEYS[1], 'ttl', ttl)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {2, count, tonumber(v[3]), ttl, now_ms}
end
return {0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, redis.call('PTTL', KEYS[1]), now_ms}
