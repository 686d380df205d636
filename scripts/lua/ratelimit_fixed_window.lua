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
-- Numbers reach redis.call as the caller's strings (ARGV): a Lua number is
-- formatted with printf's %.17g on every call, which costs more than the
-- command itself.

-- decide returns the four entries of one request.
local function decide(key, limit_arg, window_arg, cost_arg)
  local limit = tonumber(limit_arg)
  local cost = tonumber(cost_arg)

  local v = redis.call('GET', key)
  local count = v and tonumber(v) or 0
  local ttl = redis.call('PTTL', key)
  if count > 0 and ttl < 0 then
    -- A counter without expiry (someone else's SET): give it this window.
    redis.call('PEXPIRE', key, window_arg)
    ttl = tonumber(window_arg)
  end

  if count + cost > limit then
    if ttl < 0 then ttl = tonumber(window_arg) end
    -- The key expires once the Redis clock is past its expiry, so the first
    -- moment a retry surely finds a fresh window is one millisecond after it.
    return 0, math.max(limit - count, 0), ttl, ttl + 1
  end

  count = redis.call('INCRBY', key, cost_arg)
  if count == cost then
    redis.call('PEXPIRE', key, window_arg)
    ttl = tonumber(window_arg)
  end
  return 1, limit - count, ttl, 0
end

local out = {}
for i = 1, #KEYS do
  local a = 3 * i
  local ok, allowed, remaining, reset, retry = pcall(decide, KEYS[i], ARGV[a - 2], ARGV[a - 1], ARGV[a])
  if not ok then
    -- Redis raises a table {err = text}, the embedded store a string. One
    -- assignment each: gopher-lua (the embedded store) gets a multiple
    -- assignment that reads what it assigns wrong.
    remaining = type(allowed) == 'table' and allowed.err or tostring(allowed)
    allowed, reset, retry = -1, 0, 0
  end
  local o = 4 * i
  out[o - 3], out[o - 2], out[o - 1], out[o] = allowed, remaining, reset, retry
end
return out
