-- lib/force_release.lua: the body of force_release.lua and
-- el_force_release.lua (see their headers): the lease removed whoever holds
-- it, the fence counter bumped above it, the loss recorded, waiters woken.
-- Needs lib/lost.lua and member_kind, the registry member's kind prefix
-- ('' for a lock, 'el/' for an election).
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
    redis.call('ZREM', KEYS[4], member_kind .. tok .. ':' .. ARGV[3])
    local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    lost_record(KEYS[5], tok, 'force_released', now_ms, v[2], v[3], ARGV[2])
  end
  redis.call('PUBLISH', KEYS[3], 'forced')
end
return removed
