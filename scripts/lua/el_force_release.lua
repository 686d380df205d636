-- el_force_release: admin removal of an election's leader, as
-- force_release.lua removes a lock's holder. Bumps the term counter so that
-- the evicted leader's term is stale, and wakes the candidates. The wake-up
-- message is "forced" (a release's is "released"), so a
-- hold stream can tell its owner why the lease was lost.
--
-- KEYS[1]  leadership hash (fields: see el_acquire.lua)
-- KEYS[2]  fence counter
-- KEYS[3]  pub/sub channel that waiters of this lock listen on
-- KEYS[4]  keep-alive registry (zset); the evicted lease is removed from it
-- KEYS[5]  lost-lease reasons of this lock (hash: token -> reason)
-- ARGV[1]  fence retention in milliseconds (the counter's TTL: no lease is left)
-- ARGV[2]  how long lost-lease reasons are kept, in milliseconds
-- ARGV[3]  election name, with "@<tenant>" for a tenant's election
--          (keep-alive registry members are "el/<token>:<name>[@<tenant>]")
--
-- Reply: 1 when a leader was removed, 0 when the leadership was vacant.
--#include lib/lost.lua
local v = redis.call('HMGET', KEYS[1], 't', 'f', 'o')
local tok = v[1]
local removed = redis.call('DEL', KEYS[1])
if removed == 1 then
  -- The bump follows acquire's rule, max(last + 1, TIME in µs), where last
  -- is the larger of the counter and the evicted fence, so it is above the
  -- evicted fence also when the counter went back or is gone (see
  -- acquire.lua); the next grant's fence is above the bump. It is kept for
  -- the fence retention: no lease is left.
  local last = math.max(tonumber(redis.call('GET', KEYS[2])) or 0, tonumber(v[2]) or 0)
  local t = redis.call('TIME')
  local bump = t[1] .. string.sub('000000' .. t[2], -6)
  if last >= tonumber(bump) then
    bump = string.format('%d', last + 1)
  end
  redis.call('SET', KEYS[2], bump, 'PX', ARGV[1])
  if tok then
    -- keep-alive: no renewal may follow, and the owner can learn why it lost the lease
    redis.call('ZREM', KEYS[4], 'el/' .. tok .. ':' .. ARGV[3])
    local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    lost_record(KEYS[5], tok, 'force_released', now_ms, v[2], v[3], ARGV[2])
  end
  redis.call('PUBLISH', KEYS[3], 'forced')
end
return removed
