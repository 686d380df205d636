-- el_leave: a candidate gives up (its wait ended or its client went away),
-- as leave.lua for a lock's waiter. It is removed from the waiters and the
-- queue; when it was queued and the leadership is vacant, the remaining
-- candidates are woken, so none of them waits behind one that is gone.
--
-- KEYS[1]  leadership hash
-- KEYS[2]  waiters zset (member = waiter token)
-- KEYS[3]  queue list
-- KEYS[4]  pub/sub channel of this election
-- ARGV[1]  waiter token
--
-- Reply: 1 when the waiter was registered, 0 when it was not.
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
local queued = redis.call('LREM', KEYS[3], 0, ARGV[1])
if queued > 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('PUBLISH', KEYS[4], 'left')
end
return removed
