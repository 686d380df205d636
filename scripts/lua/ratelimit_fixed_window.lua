-- ratelimit_fixed_window: the classic INCR + EXPIRE limiter, one counter per
-- window. The counter is created by the first allowed request of a window,
-- which also sets its expiry, so the window starts at that request and lasts
-- exactly window_ms by the Redis clock. Denied requests change nothing.
--
-- KEYS[1]  counter (string); its PTTL is the time left in the window
-- ARGV[1]  limit: requests (cost units) allowed per window, >= 1
-- ARGV[2]  window in milliseconds, >= 1
-- ARGV[3]  cost of this request, 1 <= cost <= limit
--
-- Reply: {allowed, remaining, reset_ms, retry_after_ms}
--   allowed         1 = allowed (cost counted), 0 = denied (nothing counted)
--   remaining       cost units left in the window after this decision
--   reset_ms        time until the window ends and the full limit is back
--   retry_after_ms  0 when allowed; else when the same request will be allowed
-- Numbers reach redis.call as the caller's strings (ARGV): a Lua number is
-- formatted with printf's %.17g on every call, which costs more than the
-- command itself.
local limit = tonumber(ARGV[1])
local cost = tonumber(ARGV[3])

local v = redis.call('GET', KEYS[1])
local count = v and tonumber(v) or 0
local ttl = redis.call('PTTL', KEYS[1])
if count > 0 and ttl < 0 then
  -- A counter without expiry (someone else's SET): give it this window.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  ttl = tonumber(ARGV[2])
end

if count + cost > limit then
  if ttl < 0 then ttl = tonumber(ARGV[2]) end
  -- The key expires once the Redis clock is past its expiry, so the first
  -- moment a retry surely finds a fresh window is one millisecond after it.
  return {0, math.max(limit - count, 0), ttl, ttl + 1}
end

count = redis.call('INCRBY', KEYS[1], ARGV[3])
if count == cost then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  ttl = tonumber(ARGV[2])
end
return {1, limit - count, ttl, 0}
