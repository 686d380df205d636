-- sem_force_release: admin release of every lease of a semaphore. Bumps the
-- fence so that fences held by the evicted leases are stale, records why
-- each lease was lost, and wakes waiters and hold streams with "forced".
--
-- KEYS[1]  capacity hash (fields: see sem_acquire.lua)
-- KEYS[2]  holders zset: token -> the lease's expiry (ms)
-- KEYS[3]  leases hash: token -> "count:fence:ttl_ms:ku:kh:kb:owner"
-- KEYS[4]  keep-alive registry (zset); the evicted leases are removed from it
-- KEYS[5]  lost-lease reasons of this semaphore (hash: token -> reason)
-- KEYS[6]  pub/sub channel that waiters of this semaphore listen on
-- ARGV[1]  fence retention in milliseconds
-- ARGV[2]  how long lost-lease reasons are kept, in milliseconds
-- ARGV[3]  what precedes the token in a lease's keep-alive registry member
-- ARGV[4]  what follows the token in it
--
-- Reply: the number of leases removed (0 when none was held).
--#include lib/lost.lua
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
local live = redis.call('ZRANGE', KEYS[2], 0, -1)
if #live == 0 then
  redis.call('DEL', KEYS[2], KEYS[3])
  return 0
end
local packed = redis.call('HMGET', KEYS[3], unpack(live))
redis.call('DEL', KEYS[2], KEYS[3])
for i, tok in ipairs(live) do
  redis.call('ZREM', KEYS[4], ARGV[3] .. tok .. ARGV[4])
  local fence, owner
  if packed[i] then
    fence, owner = string.match(packed[i], '^%d+:(%d+):%d+:%d+:%d+:%d+:(.*)$')
  end
  lost_record(KEYS[5], tok, 'force_released', now_ms, fence, owner, ARGV[2])
end
-- The bump follows sem_acquire's rule, max(last + 1, TIME in µs): every
-- later grant's fence is above every evicted one's.
local last = tonumber(redis.call('HGET', KEYS[1], 'f')) or 0
local bump = t[1] .. string.sub('000000' .. t[2], -6)
if last >= tonumber(bump) then
  bump = string.format('%d', last + 1)
end
redis.call('HSET', KEYS[1], 'f', bump)
redis.call('PEXPIRE', KEYS[1], ARGV[1]) -- no lease is left: kept for the retention
redis.call('PUBLISH', KEYS[6], 'forced')
return #live
