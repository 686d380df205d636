-- rw_leave: a waiter of a read/write lock gives up (its wait ended or its
-- client went away). It is removed from the waiters and the queue; when it
-- was queued, the remaining waiters are woken (readers queued behind a
-- departing writer may now go).
--
-- KEYS[1]  waiters zset (member = waiter token)
-- KEYS[2]  queue list ("r<token>" / "w<token>")
-- KEYS[3]  pub/sub channel that waiters of this lock listen on
-- KEYS[4]  state hash (its fields: see lib/rw.lua): its count of queued
--          waiters, qn, goes down by the entries removed
-- ARGV[1]  waiter token
--
-- Reply: 1 when the waiter was registered, 0 when it was not.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
local queued = redis.call('LREM', KEYS[2], 0, 'r' .. ARGV[1]) + redis.call('LREM', KEYS[2], 0, 'w' .. ARGV[1])
if queued > 0 then
  local qn = tonumber(redis.call('HGET', KEYS[4], 'qn'))
  if qn then
    if qn > queued then
      redis.call('HSET', KEYS[4], 'qn', qn - queued)
    else
      redis.call('HDEL', KEYS[4], 'qn')
    end
  end
  redis.call('PUBLISH', KEYS[3], 'left')
end
return removed
