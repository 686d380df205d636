-- sem_force_release: admin release of every lease of a semaphore. Bumps the
-- fence so that fences held by the evicted leases are stale, records why
-- each lease was lost, and wakes waiters and hold streams with "forced".
--
-- KEYS[1]  capacity hash (fields: see sem_acquire.lua)
-- KEYS[2]  leases hash (see lib/sem.lua)
-- KEYS[3]  keep-alive registry (zset); the evicted leases are removed from it
-- KEYS[4]  lost-lease reasons of this semaphore (hash: token -> reason)
-- KEYS[5]  pub/sub channel that waiters of this semaphore listen on
-- ARGV[1]  fence retention in milliseconds
-- ARGV[2]  how long lost-lease reasons are kept, in milliseconds
-- ARGV[3]  what precedes the token in a lease's keep-alive registry member
-- ARGV[4]  what follows the token in it
--
-- Reply: the number of leases removed (0 when none was held).
--#include lib/lost.lua
--#include lib/sem.lua
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HEXISTS', KEYS[2], '#u') == 0 then
  sem_scan().upgrade(KEYS[2], now_ms) -- a legacy hash's leases are evicted too
end
local all = redis.call('HGETALL', KEYS[2])
redis.call('DEL', KEYS[2])
local live = 0
for i = 1, #all, 2 do
  local tok = all[i]
  local count, expiry, fence, _, _, _, _, owner = sem_lease(all[i + 1])
  if string.sub(tok, 1, 1) ~= '#' and count and tonumber(expiry) > now_ms then
    live = live + 1
    redis.call('ZREM', KEYS[3], ARGV[3] .. tok .. ARGV[4])
    lost_record(KEYS[4], tok, 'force_released', now_ms, fence, owner, ARGV[2])
  end
end
if live == 0 then
  return 0
end
-- The bump follows sem_acquire's rule, max(last + 1, TIME in µs): every
-- later grant's fence is above every evicted one's.
local last = tonumber(redis.call('HGET', KEYS[1], 'f')) or 0
local bump = t[1] .. string.sub('000000' .. t[2], -6)
if last >= tonumber(bump) then
  bump = string.format('%d', last + 1)
end
-- no lease is left: kept for the retention (the next grant sets its expiry
-- again: what the leases hash knew of it went with the hash)
redis.call('HSET', KEYS[1], 'f', bump)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PUBLISH', KEYS[5], 'forced')
return live
