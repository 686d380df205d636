-- sem_release: give back the permits of a semaphore lease and wake the
-- waiters.
--
-- KEYS[1]  capacity hash (fields: see sem_acquire.lua)
-- KEYS[2]  holders zset: token -> the lease's expiry (ms)
-- KEYS[3]  leases hash: token -> "count:fence:ttl_ms:ku:kh:kb:owner"
-- KEYS[4]  keep-alive registry (zset); the lease's entry is removed
-- KEYS[5]  lost-lease reasons of this semaphore (hash: token -> reason)
-- KEYS[6]  pub/sub channel that waiters of this semaphore listen on; the
--          wake-up says how many permits are free ("released:<available>")
-- ARGV[1]  token (base64url)
-- ARGV[2]  keep-alive registry member of the lease
-- ARGV[3]  fence retention in milliseconds: when no lease is left, the
--          capacity hash (KEYS[1]) is kept for that long only
--
-- Reply: {status, count}
--   status 1 = released (count is the permits given back),
--          -1 = no such lease (expired, released or force-released)
--#include lib/lost.lua
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))
local v = redis.call('HGET', KEYS[3], ARGV[1])
if not v or not expiry or expiry <= now_ms then
  return {-1, 0}
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
-- leases past their expiry go too, so the wake-up counts their permits free
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now_ms)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
  redis.call('HDEL', KEYS[3], unpack(gone))
end
redis.call('ZREM', KEYS[4], ARGV[2])
-- a released lease is not lost
lost_forget(KEYS[5], ARGV[1])
local available = tonumber(redis.call('HGET', KEYS[1], 'p')) or 0
for _, w in ipairs(redis.call('HVALS', KEYS[3])) do
  available = available - tonumber(string.match(w, '^%d+'))
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  -- no lease is left: the capacity record outlives the last by the retention
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
redis.call('PUBLISH', KEYS[6], 'released:' .. math.max(available, 0))
return {1, tonumber(string.match(v, '^%d+'))}
