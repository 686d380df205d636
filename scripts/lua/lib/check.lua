-- lib/check.lua: how the algorithms' checks answer, and the single-limit
-- decision built from one.
--
-- A check (fixed_window, sliding_window, token_bucket) reads its key and
-- returns status, remaining, reset_ms, retry_after_ms, write:
--   status 0   the limit denies; the rest are the denial's entries and
--              nothing was written
--   status 2   the limit allows: remaining and reset_ms are the values now,
--              before counting, and write() counts the request and returns
--              the remaining and reset_ms after it (and, for a lease, the
--              units it granted)

-- decide_now runs a check's write at once when it allows: the four entries
-- of a single-limit decision (allowed 1 or 0, remaining, reset_ms,
-- retry_after_ms).
local function decide_now(status, remaining, reset, retry, write)
  if status == 0 then return 0, remaining, reset, retry end
  remaining, reset = write()
  return 1, remaining, reset, 0
end
