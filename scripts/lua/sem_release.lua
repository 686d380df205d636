-- sem_release: give back the permits of a semaphore lease and wake the
-- waiters.
--
-- KEYS[1]  capacity hash (fields: see sem_acquire.lua)
-- KEYS[2]  leases hash (see lib/sem.lua)
-- KEYS[3]  keep-alive registry (zset); a kept-alive lease's entry is removed
-- KEYS[4]  lost-lease reasons of this semaphore (hash: token -> reason)
-- KEYS[5]  pub/sub channel that waiters of this semaphore listen on; the
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
--#include lib/sem.lua
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tok = ARGV[1]
local r = sem_hmget(KEYS[2], now_ms, false, tok, '#e')
local count, expiry, _, _, untl = sem_lease(r[2])
if not count or tonumber(expiry) <= now_ms then
  return {-1, 0}
end
count = tonumber(count)
local u = (tonumber(r[1]) or count) - count
if u <= 0 then
  redis.call('DEL', KEYS[2])
else
  redis.call('HDEL', KEYS[2], tok)
  local e = tonumber(r[3])
  if e and e <= now_ms then
    -- leases past their expiry go too, so the wake-up counts their permits free
    u = sem_prune(KEYS[2], tok, now_ms)
  else
    redis.call('HSET', KEYS[2], '#u', u)
  end
end
if tonumber(untl) > 0 then
  -- a lease kept alive leaves the registry, and a released lease is not
  -- lost (only a kept-alive lease has a record while it is held: a grant
  -- forgets the token's earlier one)
  redis.call('ZREM', KEYS[3], ARGV[2])
  lost_forget(KEYS[4], tok)
end
local p = tonumber(redis.call('HGET', KEYS[1], 'p'))
local available = (p or 0) - u
if u <= 0 and p then
  -- no lease is left: the capacity record outlives the last by the
  -- retention, and drops its expiry's record (the next grant sets both), so
  -- an idle name keeps the fewest bytes
  redis.call('HDEL', KEYS[1], 'x')
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
redis.call('PUBLISH', KEYS[5], 'released:' .. math.max(available, 0))
return {1, count}
