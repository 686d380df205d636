-- ratelimit_fixed_window: the classic INCR + EXPIRE limiter, one counter per
-- window. The counter is created by the first allowed request of a window,
-- which also sets its expiry, so the window starts at that request and lasts
-- exactly window_ms by the Redis clock. Denied requests change nothing.
--
-- One call decides n >= 1 requests, one after the other, each on its own
-- key: concurrent requests are sent to Redis together in one call.
--
-- KEYS[i]       counter of request i (string); its PTTL is the time left in
--               the window
-- ARGV[3i-2]    limit: requests (cost units) allowed per window, >= 1
-- ARGV[3i-1]    window in milliseconds, >= 1
-- ARGV[3i]      cost of request i, 1 <= cost <= limit
--
-- Reply: four entries per request, in order: allowed, remaining, reset_ms,
-- retry_after_ms
--   allowed         1 = allowed (cost counted), 0 = denied (nothing counted)
--   remaining       cost units left in the window after this decision
--   reset_ms        time until the window ends and the full limit is back
--   retry_after_ms  0 when allowed; else when the same request will be allowed
-- A request whose key cannot be used (it holds another type) answers -1 and
-- the error's text in its first two entries; the others are decided as usual.

--#include lib/check.lua
--#include lib/fixed_window.lua
--#include lib/batch.lua

local st = {}
return decide_batch(function(key, limit, window, cost)
  return decide_now(st, fixed_window(st, key, limit, window, cost))
end, 3)
