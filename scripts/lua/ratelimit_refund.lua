-- ratelimit_refund: gives units back to the fixed-window counters of one
-- decision's limits (a request settled for less than it was allowed): each
-- counter goes down by the units and keeps its expiry, so its window ends
-- when it would have; one that would go to 0 or below is deleted (its
-- window has its whole limit, as a window that is over does). A counter
-- that does not exist is left so. Calendar windows name their period's
-- counter and check it holds now, as ratelimit_multi.lua does.
--
-- n = #KEYS, the number of limits.
-- KEYS[i]      the counter of limit i (fw or cw)
-- ARGV[1]      units to give back, >= 1
-- ARGV[2i]     the start of limit i's calendar period in Unix milliseconds,
--              or "" for a window that is not a calendar period
-- ARGV[2i+1]   the end of that period, or ""
--
-- Reply: two entries per limit, in order: count, ttl_ms
--   count   the counter after the refund (0 when it does not exist now)
--   ttl_ms  its PTTL: the time left in its window (-2: no counter)
-- When a calendar period does not hold the Redis clock's now, the reply is
-- {-2, now_ms} and nothing is written.

--#include lib/clock.lua
--#include lib/period.lua

local units = tonumber(ARGV[1])
for i = 1, #KEYS do
  if ARGV[2 * i] ~= '' and not in_period(ARGV[2 * i], ARGV[2 * i + 1]) then
    return period_miss()
  end
end

local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local v = redis.call('GET', key)
  local count = 0
  if v then
    count = tonumber(v) - units
    if count > 0 then
      redis.call('SET', key, string.format('%d', count), 'KEEPTTL')
    else
      count = 0
      redis.call('DEL', key)
    end
  end
  out[2 * i - 1] = count
  out[2 * i] = redis.call('PTTL', key)
end
return out
