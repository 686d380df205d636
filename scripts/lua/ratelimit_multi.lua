-- ratelimit_multi: one decision under several limits at once (a policy's
-- "limits:" list), each limit on its own key and with its own algorithm:
-- the request is allowed only if every limit allows it, and then its cost is
-- counted by every limit; a denied request changes nothing in any of them.
-- Every limit is checked first, then, only if all allow, every one is
-- counted. The algorithms' checks are those of the single scripts
-- (lib/*.lua); their header comments describe the keys' values, which are
-- the same here. The clock is read from Redis TIME once per call.
--
-- KEYS[i]     the key of limit i (distinct per limit)
-- ARGV[1]     cost of the request, 1 <= cost <= every limit's capacity
-- ARGV[4i-2]  algorithm of limit i: fw, sw or tb
-- ARGV[4i-1]  limit i's limit (as each single script takes it)
-- ARGV[4i]    limit i's window in milliseconds
-- ARGV[4i+1]  limit i's burst (tb; ignored otherwise)
--
-- Reply: four entries per limit, in order: status, remaining, reset_ms,
-- retry_after_ms
--   status          1 = allowed and counted (every limit allowed);
--                   0 = this limit denies (nothing counted anywhere);
--                   2 = this limit alone would allow, but another denies,
--                       so nothing was counted
--   remaining       cost units left after this decision (1), or left now
--                   (0 and 2)
--   reset_ms        time until the full limit is back, after this decision
--                   (1) or now (0 and 2)
--   retry_after_ms  when the same request will be allowed by this limit
--                   (0), else 0
-- A key that cannot be used (it holds another type) fails the whole call
-- before anything is written.

--#include lib/clock.lua
--#include lib/check.lua
--#include lib/fixed_window.lua
--#include lib/sliding_window.lua
--#include lib/muldiv.lua
--#include lib/token_bucket.lua

local cost_arg = ARGV[1]
local checks = {}
local all = true
for i = 1, #KEYS do
  local a = 4 * i + 1
  local alg = ARGV[a - 3]
  local r
  if alg == 'fw' then
    r = {fixed_window(KEYS[i], ARGV[a - 2], ARGV[a - 1], cost_arg)}
  elseif alg == 'sw' then
    r = {sliding_window(KEYS[i], ARGV[a - 2], ARGV[a - 1], cost_arg)}
  else
    r = {token_bucket(KEYS[i], ARGV[a - 2], ARGV[a - 1], ARGV[a], cost_arg)}
  end
  if r[1] == 0 then all = false end
  checks[i] = r
end

local out = {}
for i = 1, #KEYS do
  local r = checks[i]
  local o = 4 * i
  if all then
    local remaining, reset = r[5]()
    out[o - 3] = 1
    out[o - 2] = remaining
    out[o - 1] = reset
    out[o] = 0
  else
    out[o - 3] = r[1]
    out[o - 2] = r[2]
    out[o - 1] = r[3]
    out[o] = r[4]
  end
end
return out
