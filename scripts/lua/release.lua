-- release: drop one hold of a lease; the last hold frees the lock and
-- publishes a wake-up for waiters.
--
-- KEYS[1]  lock hash (fields: see acquire.lua)
-- KEYS[2]  pub/sub channel that waiters of this lock listen on
-- KEYS[3]  keep-alive registry (zset); the last hold removes the lease from it
-- KEYS[4]  lost-lease reasons of this lock (hash: token -> reason)
-- KEYS[5]  fence counter; the last hold keeps it for the fence retention
--          only (it was kept for the lease's span and the retention)
-- ARGV[1]  token (base64url)
-- ARGV[2]  keep-alive registry member ("<token>:<name>")
-- ARGV[3]  fence retention in milliseconds
--
-- Reply: {status, hold_count}
--   status 1 = released (hold_count is what remains; 0 means the lock is free)
--   status -1 = no such lease (expired or released)
--   status -2 = held by another token
--#include lib/lost.lua
local v = redis.call('HMGET', KEYS[1], 't', 'ku')
local tok = v[1]
if not tok then
  return {-1, 0}
end
if tok ~= ARGV[1] then
  return {-2, 0}
end
local count = redis.call('HINCRBY', KEYS[1], 'n', '-1') -- a string: see acquire.lua
if count > 0 then
  return {1, count}
end
redis.call('DEL', KEYS[1])
redis.call('PEXPIRE', KEYS[5], ARGV[3])
if v[2] then
  -- keep-alive: no renewal may follow a release (only a lease with a
  -- max-hold deadline, ku, has a registry entry)
  redis.call('ZREM', KEYS[3], ARGV[2])
end
-- a released lease is not lost
lost_forget(KEYS[4], ARGV[1])
redis.call('PUBLISH', KEYS[2], 'released')
return {1, 0}
