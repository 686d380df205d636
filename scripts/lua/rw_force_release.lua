-- rw_force_release: admin release of a read/write lock, whoever holds it:
-- the writer and every reader lose their leases. Bumps the fence counter so
-- every evicted fence is stale, records why each holder lost its lease, and
-- wakes waiters with "forced".
--
-- KEYS[1]  state hash (fields: see rw_acquire.lua)
-- KEYS[2]  readers zset (token -> expiry, ms)
-- KEYS[3]  fence counter
-- KEYS[4]  pub/sub channel that waiters of this lock listen on
-- KEYS[5]  keep-alive registry (zset); the evicted leases are removed from it
-- KEYS[6]  lost-lease reasons of this lock (hash: token -> reason)
-- KEYS[7]  waiters zset (token -> deadline, ms)
-- ARGV[1]  fence retention in milliseconds
-- ARGV[2]  how long lost-lease reasons are kept, in milliseconds
-- ARGV[3]  lock name (registry members are "rw/<token>:<name>")
--
-- Reply: the number of holders (tokens) evicted, 0 when the lock was free.
--#include lib/rw.lua
--#include lib/lost.lua
local S, H, F, C, R, L, W = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local writer, readers = rw_prune(S, H)
local holders = redis.call('ZRANGE', H, 0, -1)
if writer and not redis.call('ZSCORE', H, writer) then
  holders[#holders + 1] = writer
end
if #holders == 0 then
  return 0
end
local last = math.max(tonumber(redis.call('GET', F)) or 0, tonumber(redis.call('HGET', S, 'wf')) or 0)
local bump = rw_now_us()
if last >= tonumber(bump) then
  bump = string.format('%d', last + 1)
end
redis.call('SET', F, bump, 'PX', ARGV[1]) -- no lease is left: kept for the retention
local wv = redis.call('HMGET', S, 'wf', 'wo')
for _, tok in ipairs(holders) do
  redis.call('ZREM', R, 'rw/' .. tok .. ':' .. ARGV[3])
  local rv = redis.call('HGET', S, tok)
  local fence, owner = wv[1], wv[2] -- the writer's, unless tok reads
  if rv then
    local r = rw_reader(rv)
    fence, owner = r.f, r.o
  end
  lost_record(L, tok, 'force_released', now_ms, fence, owner, ARGV[2])
  redis.call('HDEL', S, tok)
end
redis.call('HDEL', S, unpack(rw_writer_fields))
redis.call('DEL', H)
rw_settle(S, H, W)
redis.call('PUBLISH', C, 'forced')
return #holders
