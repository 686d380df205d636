-- ratelimit_sliding_window: the two-counter sliding window approximation.
-- Time is cut into fixed windows aligned on the Redis clock; the count of the
-- sliding window ending now is estimated as
--   previous_count * (window - elapsed) / window + current_count
-- where elapsed is the time since the current fixed window began. Both
-- counters live in one string, so a decision touches a single key. Denied
-- requests change nothing.
--
-- One call decides n >= 1 requests, one after the other, each on its own
-- key: concurrent requests are sent to Redis together in one call. They
-- share one reading of the Redis clock.
--
-- KEYS[i]  string holding w = index of the current fixed window, c = its
--          count and p = count of the window before it; expires 2 windows
--          after the last allowed request. Two forms:
--            integer  the digits of w, then c and p zero-padded to n digits
--                     each, then n: w=29731045 c=7 p=12 is 2973104507122.
--                     Redis keeps an integer in the key itself, so the key
--                     is as small as a fixed-window counter.
--            text     "w:c:p", when the integer would not fit in 64 bits
--                     (counts of many digits, very short windows); about
--                     32 bytes more per key
--          A hash {w, c, p}, as earlier versions wrote, is read too and
--          replaced by the string at the next allowed request. Any other
--          string counts as no key. A w one window ahead of the Redis clock
--          (a clock that stepped back) keeps its counts; further ahead (left
--          by a shorter window), or behind by more than one, starts afresh.
-- ARGV[3i-2]  limit: requests (cost units) allowed per window, >= 1
-- ARGV[3i-1]  window in milliseconds, >= 1
-- ARGV[3i]    cost of request i, 1 <= cost <= limit
--
-- Reply: four entries per request, in order: allowed, remaining, reset_ms,
-- retry_after_ms
--   allowed         1 = allowed (cost counted), 0 = denied (nothing counted)
--   remaining       whole cost units that would still be allowed right now
--   reset_ms        time until the estimate drains to 0 with no more requests
--   retry_after_ms  0 when allowed; else the earliest time at which the same
--                   request will be allowed (rounded up, plus 1 ms)
-- A request whose key cannot be used answers -1 and the error's text in its
-- first two entries; the others are decided as usual.

--#include lib/clock.lua
--#include lib/check.lua
--#include lib/sliding_window.lua
--#include lib/batch.lua

local st = {}
return decide_batch(function(key, limit, window, cost)
  return decide_now(st, sliding_window(st, key, limit, window, cost))
end, 3)
