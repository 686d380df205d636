-- el_release: the leader resigns. The leadership is vacant at once and the
-- candidates are woken.
--
-- KEYS[1]  leadership hash (fields: see el_acquire.lua)
-- KEYS[2]  pub/sub channel of this election
-- KEYS[3]  keep-alive registry (zset); the lease is removed from it
-- KEYS[4]  lost-lease reasons of this election (hash: token -> reason)
-- KEYS[5]  term counter; kept for the term retention only from now
-- ARGV[1]  token (base64url)
-- ARGV[2]  keep-alive registry member ("el/<token>:<name>")
-- ARGV[3]  term retention in milliseconds
--
-- Reply: {status, hold_count}
--   status 1 = resigned (hold_count 0), -1 = no such lease (expired or
--   released), -2 = another token leads
-- A resignation publishes "released" on the channel.
--#include lib/lost.lua
local v = redis.call('HMGET', KEYS[1], 't', 'ku')
if not v[1] then
  return {-1, 0}
end
if v[1] ~= ARGV[1] then
  return {-2, 0}
end
redis.call('DEL', KEYS[1])
redis.call('PEXPIRE', KEYS[5], ARGV[3])
if v[2] then
  redis.call('ZREM', KEYS[3], ARGV[2])
end
lost_forget(KEYS[4], ARGV[1])
redis.call('PUBLISH', KEYS[2], 'released')
return {1, 0}
