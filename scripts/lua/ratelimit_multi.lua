-- ratelimit_multi: one decision under several limits at once (a policy's
-- "limits:" list), each limit on its own key and with its own algorithm:
-- the request is allowed only if every limit allows it, and then its cost is
-- counted by every limit; a denied request changes nothing in any of them.
-- Every limit is checked first, then, only if all allow, every one is
-- counted. The algorithms' checks are those of the single scripts
-- (lib/*.lua); their header comments describe the keys' values, which are
-- the same here. The clock is read from Redis TIME once per call.
--
-- A limit may be leased (fixed window only): the instance asking holds
-- have_i units of it from earlier grants and asks for the rest, need =
-- cost - have_i; when it holds the whole cost the limit is not read. A
-- granted lease counts up to lease units at once (at most what the window
-- has left), which the instance then spends without asking. A shadow limit
-- decides as usual, but its denial blocks nothing: the request is counted
-- by the other limits and not by the shadow one.
--
-- n = #KEYS, the number of limits.
-- KEYS[i]       the key of limit i (distinct per limit)
-- ARGV[1]       cost of the request, 1 <= cost <= every limit's capacity
-- ARGV[1+i]     have_i: units of limit i held from a lease, 0 <= have_i;
--               0 for a limit without a lease
-- ARGV[n+5i-3]  algorithm of limit i: fw, sw, tb, or cw (a fixed window
--               that is a calendar period, see lib/period.lua)
-- ARGV[n+5i-2]  limit i's limit (as each single script takes it)
-- ARGV[n+5i-1]  limit i's window in milliseconds; cw: the end of its
--               period in Unix milliseconds, when its counter expires
-- ARGV[n+5i]    tb: limit i's burst; fw: its lease, the units to grant at
--               once (0: no lease); sw: ignored; cw: the start of its
--               period in Unix milliseconds
-- ARGV[n+5i+1]  1 = limit i is in shadow mode, 0 = it is enforced
-- ARGV[6n+2]    optional: 1 = peek: decide, write nothing; an allowed
--               limit answers status 1 with remaining and reset_ms as they
--               are now, granted 0
--
-- Reply: five entries per limit, in order: status, remaining, reset_ms,
-- retry_after_ms, granted
--   status          1 = allowed and counted (every enforced limit allowed);
--                   0 = this limit denies (nothing counted anywhere);
--                   2 = this limit alone would allow, but another denies,
--                       so nothing was counted;
--                   3 = this shadow limit denies: not counted, and it
--                       blocks nothing
--   remaining       cost units left after this decision (1), or left now
--                   (0, 2 and 3); -1 for a limit not read (held lease)
--   reset_ms        time until the full limit is back, after this decision
--                   (1) or now (0, 2 and 3); -1 for a limit not read
--   retry_after_ms  when the same request will be allowed by this limit
--                   (0 and 3), else 0
--   granted         the units counted by this limit: need, or up to its
--                   lease (1); 0 otherwise
-- A key that cannot be used (it holds another type) fails the whole call
-- before anything is written. When the period of a cw limit does not hold
-- the Redis clock's now, the reply is {-2, now_ms} and nothing is written.

--#include lib/clock.lua
--#include lib/check.lua
--#include lib/fixed_window.lua
--#include lib/sliding_window.lua
--#include lib/muldiv.lua
--#include lib/token_bucket.lua
--#include lib/period.lua
--#include lib/multi.lua

local n = #KEYS
for i = 1, n do
  local a = n + 5 * i
  if ARGV[a - 3] == 'cw' and not in_period(ARGV[a], ARGV[a - 1]) then
    return period_miss()
  end
end
local out = {}
decide_limits(n, 0, 1, n + 1, ARGV[1], ARGV[6 * n + 2] == '1', out, 0)
return out
