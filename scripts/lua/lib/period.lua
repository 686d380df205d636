-- lib/period.lua: calendar periods against the Redis clock (lib/clock.lua
-- first). The caller computes a calendar window's period (its time zone,
-- month lengths and DST changes) from the Redis clock as it last saw it
-- and names the period's counter in KEYS; the script checks that the
-- period holds now by this call's TIME, so every instance counts in the
-- same period whatever its own clock says.
--
-- in_period reports whether now_ms is in [start_ms, end_ms), given as the
-- caller's strings. period_miss is the reply of a call whose period does
-- not hold now: -2 and now in whole milliseconds, so the caller computes
-- the period again from the Redis clock and calls again; nothing is
-- written.
local function in_period(start_arg, end_arg)
  return tonumber(start_arg) <= now_ms and now_ms < tonumber(end_arg)
end

local function period_miss()
  return {-2, math.floor(now_ms)}
end
