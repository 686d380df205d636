-- sem_leave: a waiter of a semaphore gives up (its wait ended or its client
-- went away). It is removed from the waiters and from the fair queue; when it
-- was queued the others are woken, as the next in line may take the
-- permits it was waiting for.
--
-- KEYS[1]  waiters zset (member = waiter token)
-- KEYS[2]  fair queue list
-- KEYS[3]  pub/sub channel that waiters of this semaphore listen on
-- ARGV[1]  waiter token
--
-- Reply: 1 when the waiter was registered, 0 when it was not.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('LREM', KEYS[2], 0, ARGV[1]) > 0 then
  redis.call('PUBLISH', KEYS[3], 'left')
end
return removed
