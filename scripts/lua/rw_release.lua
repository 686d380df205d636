-- rw_release: drop one hold of a token's read or write lease of a
-- read/write lock. The last hold of the write lease, and the last hold of
-- the last reader, publish a wake-up for waiters.
--
-- KEYS[1]  state hash (fields: see rw_acquire.lua)
-- KEYS[2]  readers zset (token -> expiry, ms)
-- KEYS[3]  waiters zset (token -> deadline, ms)
-- KEYS[4]  pub/sub channel that waiters of this lock listen on
-- KEYS[5]  keep-alive registry (zset)
-- KEYS[6]  lost-lease reasons of this lock (hash: token -> reason)
-- KEYS[7]  fence counter; when nobody holds the lock any more it is kept
--          for the fence retention only
-- ARGV[1]  token (base64url)
-- ARGV[2]  mode: "w" write, "r" read, "" the token's write lease when it
--          holds one, else its read lease
-- ARGV[3]  keep-alive registry member ("rw/<token>:<name>")
-- ARGV[4]  fence retention in milliseconds
--
-- Reply: {status, hold_count, mode}
--   status 1 = released (hold_count is what remains of that lease),
--   -1 = no such lease (expired or released) and nobody holds the lock,
--   -2 = no such lease, and another token holds the lock;
--   mode 1 = the read lease, 2 = the write lease.
--#include lib/rw.lua
--#include lib/lost.lua
local S, H, W, C, R, L, F = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local tok, mode = ARGV[1], ARGV[2]
local writer, readers = rw_prune(S, H)
if mode == '' then
  mode = writer == tok and 'w' or 'r'
end
local m = mode == 'w' and 2 or 1
local rv = mode == 'r' and redis.call('HGET', S, tok)
if (mode == 'w' and writer ~= tok) or (mode == 'r' and not rv) then
  if writer or readers > 0 then
    return {-2, 0, m}
  end
  return {-1, 0, m}
end
local count, freed, ka_left
if mode == 'w' then
  count = redis.call('HINCRBY', S, 'wn', -1)
  if count <= 0 then
    redis.call('HDEL', S, unpack(rw_writer_fields))
    freed = true
    local r = rv or redis.call('HGET', S, tok)
    ka_left = r and rw_reader(r).ku > 0
  end
else
  local r = rw_reader(rv)
  r.n = r.n - 1
  count = r.n
  if count > 0 then
    redis.call('HSET', S, tok, rw_packed(r))
  else
    redis.call('HDEL', S, tok)
    redis.call('ZREM', H, tok)
    freed = redis.call('ZCARD', H) == 0
    ka_left = writer == tok and redis.call('HGET', S, 'wku')
  end
end
if count <= 0 then
  if not ka_left then
    -- no renewal may follow: the token keeps no other kept-alive lease here
    redis.call('ZREM', R, ARGV[3])
  end
  lost_forget(L, tok) -- a released lease is not lost
end
rw_settle(S, H, W)
if freed then
  if redis.call('ZCARD', H) == 0 and redis.call('HEXISTS', S, 'w') == 0 then
    -- nobody holds the lock: the counter outlives its last lease by the retention
    redis.call('PEXPIRE', F, ARGV[4])
  end
  redis.call('PUBLISH', C, 'released')
end
return {1, math.max(count, 0), m}
