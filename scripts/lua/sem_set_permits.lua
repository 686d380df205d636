-- sem_set_permits: the admin changes a semaphore's capacity. Leases already
-- granted keep their permits; when the new capacity is below the permits in
-- use, new grants wait until enough leases end. Waiters are woken: a larger
-- capacity may let them in, and a waiter that asked for the old capacity
-- learns of the change on its next attempt.
--
-- KEYS[1]  capacity hash (fields: see sem_acquire.lua)
-- KEYS[2]  leases hash (see lib/sem.lua): the capacity it keeps ('#p') is
--          changed too, when it keeps one
-- KEYS[3]  pub/sub channel that waiters of this semaphore listen on
-- ARGV[1]  permits: the new capacity N
-- ARGV[2]  fence retention in milliseconds: the capacity record is kept
--          for at least that long (longer when a lease needs it)
--
-- Reply: the previous capacity (0 when none was stored).
local prev = tonumber(redis.call('HGET', KEYS[1], 'p')) or 0
redis.call('HSET', KEYS[1], 'p', ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if redis.call('HEXISTS', KEYS[2], '#p') == 1 then
  redis.call('HSET', KEYS[2], '#p', ARGV[1])
end
redis.call('PUBLISH', KEYS[3], 'resized')
return prev
