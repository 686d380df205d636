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
-- The decisions' limits come first, once per set of limits (a policy's:
-- every decision of a policy has the same, and Redis makes a Lua string of
-- every entry of a call), then two entries per decision.
-- ARGV[1]          S, the number of sets of limits, >= 1
-- then, for each set s, 1 + 5 n_s entries from ARGV[P_s]:
-- ARGV[P_s]        n_s, the number of its limits, >= 1
-- ARGV[P_s+5i-4]   algorithm of limit i: fw, sw or tb
-- ARGV[P_s+5i-3]   limit i's limit (as each single script takes it)
-- ARGV[P_s+5i-2]   limit i's window in milliseconds
-- ARGV[P_s+5i-1]   tb: limit i's burst; fw: 0 (no lease); sw: ignored
-- ARGV[P_s+5i]     1 = limit i is in shadow mode, 0 = it is enforced
-- then, for each decision j, from ARGV[D_j] on:
-- ARGV[D_j]        s_j, the set of its limits (1 to S)
-- ARGV[D_j+1]      its cost, 1 <= cost <= every limit's capacity
-- Decision j has n_(s_j) limits; its keys follow those of the decisions
-- before it in KEYS: with K the keys of the decisions before j, KEYS[K+i]
-- is the key of its limit i (distinct per limit).
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
local set_at, set_n = {}, {}
local a = 1
for set = 1, tonumber(ARGV[1]) do
  set_at[set] = a + 1
  set_n[set] = tonumber(ARGV[a + 1])
  a = a + 1 + 5 * set_n[set]
end
local k, o = 0, 0
while a < #ARGV do
  local set = tonumber(ARGV[a + 1])
  local n = set_n[set]
  local ok, err = pcall(decide_limits, n, k, nil, set_at[set], ARGV[a + 2], false, out, o)
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
  a = a + 2
  o = o + 5 * n
end
return out
