-- force_release: admin release of a lock whoever holds it. Bumps the fence
-- counter so that fences held by the evicted owner are stale, and wakes
-- waiters. The wake-up message is "forced" (a release's is "released"), so a
-- hold stream can tell its owner why the lease was lost.
--
-- KEYS[1]  lock hash
-- KEYS[2]  fence counter
-- KEYS[3]  pub/sub channel that waiters of this lock listen on
-- ARGV[1]  fence counter TTL in milliseconds
--
-- Reply: 1 when a lease was removed, 0 when the lock was free.
local removed = redis.call('DEL', KEYS[1])
if removed == 1 then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('INCR', KEYS[2])
    redis.call('PEXPIRE', KEYS[2], ARGV[1])
  end
  redis.call('PUBLISH', KEYS[3], 'forced')
end
return removed
