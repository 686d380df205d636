-- ratelimit_multi_batch: many multi-limit decisions in one call, each
-- decided as ratelimit_multi.lua decides one (lib/multi.lua): allowed only
-- if every enforced limit of its own allows, and then counted by every one;
-- a denied decision changes nothing. Each decision is decided on its own,
-- one after the other: one decision's denial or failure changes nothing of
-- another's, which sees the counts of the decisions before it. Concurrent
-- decisions of multi-limit policies are sent to Redis together in one call.
-- The clock is read from Redis TIME once per call.
--
-- Only the common case comes here: no limit is leased (no units held, no
-- grant), no peek, no calendar window (whose period ratelimit_multi.lua
-- checks against the Redis clock); those go to ratelimit_multi.lua.
--
-- Decision j has n_j limits; its keys follow those of the decisions before
-- it in KEYS, and its 2 + 5 n_j entries those of the decisions before it in
-- ARGV. With K and A the keys and ARGV entries of the decisions before j:
-- KEYS[K+i]        the key of limit i of decision j (distinct per limit)
-- ARGV[A+1]        n_j, the number of its limits, >= 1
-- ARGV[A+2]        its cost, 1 <= cost <= every limit's capacity
-- ARGV[A+2+5i-4]   algorithm of limit i: fw, sw or tb
-- ARGV[A+2+5i-3]   limit i's limit (as each single script takes it)
-- ARGV[A+2+5i-2]   limit i's window in milliseconds
-- ARGV[A+2+5i-1]   tb: limit i's burst; fw: 0 (no lease); sw: ignored
-- ARGV[A+2+5i]     1 = limit i is in shadow mode, 0 = it is enforced
--
-- Reply: five entries per limit of each decision, in order, as
-- ratelimit_multi.lua answers one decision (status, remaining, reset_ms,
-- retry_after_ms, granted). A decision one of whose keys cannot be used
-- (it holds another type) answers -1 and the error's text in its first two
-- entries and 0 in the rest of its 5 n_j, having written nothing; the
-- others are decided as usual.

--#include lib/clock.lua
--#include lib/check.lua
--#include lib/fixed_window.lua
--#include lib/sliding_window.lua
--#include lib/muldiv.lua
--#include lib/token_bucket.lua
--#include lib/multi.lua

local out = {}
local k, a, o = 0, 0, 0
while a < #ARGV do
  local n = tonumber(ARGV[a + 1])
  local ok, err = pcall(decide_limits, n, k, nil, a + 2, ARGV[a + 2], false, out, o)
  if not ok then
    -- Redis raises a table {err = text}, the embedded store a string. One
    -- assignment each: gopher-lua (the embedded store) gets a multiple
    -- assignment that reads what it assigns wrong.
    out[o + 1] = -1
    out[o + 2] = type(err) == 'table' and err.err or tostring(err)
    for e = o + 3, o + 5 * n do
      out[e] = 0
    end
  end
  k = k + n
  a = a + 2 + 5 * n
  o = o + 5 * n
end
return out
