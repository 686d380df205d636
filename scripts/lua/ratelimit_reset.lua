-- ratelimit_reset: an operator's reset of one key under a policy: the
-- counters of its limits are deleted, so the key has its full limits
-- again. Calendar windows name their period's counter and check it holds
-- now, as ratelimit_multi.lua does.
--
-- n = #KEYS, the number of counters.
-- KEYS[i]      the counter of limit i, of any algorithm
-- ARGV[2i-1]   the start of limit i's calendar period in Unix
--              milliseconds, or "" for a window that is not a calendar one
-- ARGV[2i]     the end of that period, or ""
--
-- Reply: {deleted}, the number of counters that existed. When a calendar
-- period does not hold the Redis clock's now, the reply is {-2, now_ms}
-- and nothing is deleted.

--#include lib/clock.lua
--#include lib/period.lua

for i = 1, #KEYS do
  if ARGV[2 * i - 1] ~= '' and not in_period(ARGV[2 * i - 1], ARGV[2 * i]) then
    return period_miss()
  end
end
return {redis.call('DEL', unpack(KEYS))}
