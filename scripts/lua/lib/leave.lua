-- lib/leave.lua: the body of leave.lua and el_leave.lua (see their
-- headers): a waiter leaves the waiters and the queue, and the next one
-- hears it when the name is free.
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
local queued = redis.call('LREM', KEYS[3], 0, ARGV[1])
if queued > 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('PUBLISH', KEYS[4], 'left')
end
return removed
