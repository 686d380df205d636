-- sem_release: give back the permits of a semaphore lease and wake the
-- waiters.
--
-- KEYS[1]  capacity hash (fields: see sem_acquire.lua); read only when the
--          leases hash does not know the capacity ('#p')
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
local r = redis.call('HMGET', KEYS[2], '#u', tok, '#e', '#p')
if not r[1] and r[2] and sem_scan().upgrade(KEYS[2], now_ms) then
  r = redis.call('HMGET', KEYS[2], '#u', tok, '#e', '#p') -- a legacy hash, rewritten
end
-- the count, expiry and keep-alive deadline of tok's lease (lib/sem.lua)
local count, expiry, untl = string.match(r[2] or '', '^(%d+):(%d+):%d+:%d+:(%d+):')
if not count or tonumber(expiry) <= now_ms then
  return {-1, 0}
end
count = tonumber(count)
local u = (tonumber(r[1]) or count) - count
if u > 0 then
  redis.call('HDEL', KEYS[2], tok)
  local e = tonumber(r[3])
  if e and e <= now_ms then
    -- leases past their expiry go too, so the wake-up counts their permits free
    u = sem_scan().prune(KEYS[2], tok, now_ms)
  else
    redis.call('HSET', KEYS[2], '#u', sem_str(u))
  end
else
  redis.call('DEL', KEYS[2])
end
if tonumber(untl) > 0 then
  -- a lease kept alive leaves the registry, and a released lease is not
  -- lost (only a kept-alive lease has a record while it is held: a grant
  -- forgets the token's earlier one)
  redis.call('ZREM', KEYS[3], ARGV[2])
  lost_forget(KEYS[4], tok)
end
local p = r[4] or redis.call('HGET', KEYS[1], 'p')
if u <= 0 then
  -- no lease is left: the capacity record outlives the last by the
  -- retention, so an idle name is kept no longer (the next grant sets its
  -- expiry again: what the leases hash knew of it went with the hash)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
local available = p
if u ~= 0 or not p then
  available = sem_str(math.max((tonumber(p) or 0) - u, 0))
end
redis.call('PUBLISH', KEYS[5], 'released:' .. available)
return {1, count}
