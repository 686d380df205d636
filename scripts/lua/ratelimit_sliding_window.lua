-- ratelimit_sliding_window: the two-counter sliding window approximation.
-- Time is cut into fixed windows aligned on the Redis clock; the count of the
-- sliding window ending now is estimated as
--   previous_count * (window - elapsed) / window + current_count
-- where elapsed is the time since the current fixed window began. Both
-- counters live in one hash, so a decision touches a single key. Denied
-- requests change nothing.
--
-- KEYS[1]  hash {w = index of the current fixed window, c = its count,
--          p = count of the window before it}; expires 2 windows after the
--          last allowed request
-- ARGV[1]  limit: requests (cost units) allowed per window, >= 1
-- ARGV[2]  window in milliseconds, >= 1
-- ARGV[3]  cost of this request, 1 <= cost <= limit
--
-- Reply: {allowed, remaining, reset_ms, retry_after_ms}
--   allowed         1 = allowed (cost counted), 0 = denied (nothing counted)
--   remaining       whole cost units that would still be allowed right now
--   reset_ms        time until the estimate drains to 0 with no more requests
--   retry_after_ms  0 when allowed; else the earliest time at which the same
--                   request will be allowed (rounded up, plus 1 ms)
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local cur = math.floor(now / window)
local elapsed = now - cur * window

local h = redis.call('HMGET', KEYS[1], 'w', 'c', 'p')
local idx = tonumber(h[1])
local c = tonumber(h[2]) or 0
local p = tonumber(h[3]) or 0
if idx == nil or idx < cur - 1 then
  c, p = 0, 0
elseif idx == cur - 1 then
  c, p = 0, c
elseif idx > cur then
  -- The clock went back (failover to a replica behind us): keep the counts.
  cur = idx
  elapsed = 0
end

local function reset_ms(cc, pp)
  if cc > 0 then return math.ceil(2 * window - elapsed) end
  if pp > 0 then return math.ceil(window - elapsed) end
  return 0
end

local est = p * (window - elapsed) / window + c
if est + cost > limit then
  local retry
  if c + cost <= limit then
    -- The previous window's weight must fall to (limit - c - cost).
    local at = window - (limit - c - cost) * window / p
    retry = at - elapsed
  else
    -- Only the next window helps; there the current count is the previous one.
    local at = window - (limit - cost) * window / c
    retry = (window - elapsed) + at
  end
  local remaining = math.max(math.floor(limit - est), 0)
  return {0, remaining, reset_ms(c, p), math.ceil(retry) + 1}
end

c = c + cost
redis.call('HSET', KEYS[1], 'w', cur, 'c', c, 'p', p)
redis.call('PEXPIRE', KEYS[1], 2 * window)
local remaining = math.max(math.floor(limit - est - cost), 0)
return {1, remaining, reset_ms(c, p), 0}
