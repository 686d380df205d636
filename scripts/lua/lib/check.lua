-- lib/check.lua: how the algorithms' checks answer, and the single-limit
-- decision built from one.
--
-- A check (fixed_window, sliding_window, token_bucket) takes a state table
-- st first, reads its key and returns status, remaining, reset_ms,
-- retry_after_ms:
--   status 0   the limit denies; the rest are the denial's entries and
--              nothing was written
--   status 2   the limit allows: remaining and reset_ms are the values now,
--              before counting; the check has put in st what counting
--              needs, and st.write(st) counts the request and returns the
--              remaining and reset_ms after it (and, for a lease, the units
--              it granted)
-- The state tables are made once per call and reused from one check to the
-- next (a check sets every field its write reads): a decision allocates no
-- closure and no table of its own, which costs Redis more than the
-- commands do.

-- decide_now runs st's write at once when the check allows: the four
-- entries of a single-limit decision (allowed 1 or 0, remaining, reset_ms,
-- retry_after_ms).
local function decide_now(st, status, remaining, reset, retry)
  if status == 0 then return 0, remaining, reset, retry end
  remaining, reset = st.write(st)
  return 1, remaining, reset, 0
end
