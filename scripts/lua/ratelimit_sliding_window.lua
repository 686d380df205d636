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
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000

-- decode returns w, c and p from either string form, or nil.
local function decode(v)
  local w, c, p = string.match(v, '^(%d+):(%d+):(%d+)$')
  if w then return tonumber(w), tonumber(c), tonumber(p) end
  if not string.match(v, '^%d+$') then return nil end
  local n = tonumber(string.sub(v, -1))
  if n < 1 or #v < 2 * n + 2 then return nil end
  return tonumber(string.sub(v, 1, -2 * n - 2)), tonumber(string.sub(v, -2 * n - 1, -n - 2)),
    tonumber(string.sub(v, -n - 1, -2))
end

-- encode returns the integer form, or the text form from 9e18 on, where the
-- integer may not fit Redis's signed 64 bits (at most 9.22e18). Redis would
-- keep such a number as a string anyway, and the text is about as long.
local function encode(w, c, p)
  local n = #string.format('%d', math.max(c, p))
  local s = string.format('%d%0' .. n .. 'd%0' .. n .. 'd%d', w, c, p, n)
  if #s < 19 or (#s == 19 and tonumber(s) < 9e18) then return s end
  return string.format('%d:%d:%d', w, c, p)
end

-- decide returns the four entries of one request.
local function decide(key, limit_arg, window_arg, cost_arg)
  local limit = tonumber(limit_arg)
  local window = tonumber(window_arg)
  local cost = tonumber(cost_arg)
  local cur = math.floor(now / window)
  local elapsed = now - cur * window

  local idx, c, p
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then
    -- Not a string: a hash from an earlier version (anything else fails here).
    local h = redis.call('HMGET', key, 'w', 'c', 'p')
    idx, c, p = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
  elseif v then
    idx, c, p = decode(v)
  end
  c = c or 0
  p = p or 0
  if idx == nil or idx < cur - 1 then
    c, p = 0, 0
  elseif idx == cur - 1 then
    -- Two statements: gopher-lua (miniredis, the embedded store) gets
    -- "c, p = 0, c" wrong and would lose the previous count.
    p = c
    c = 0
  elseif idx == cur + 1 then
    -- The clock went back (failover to a replica behind us): keep the counts.
    cur = idx
    elapsed = 0
  elseif idx > cur then
    -- Further ahead is no clock error but a window that was raised (a named
    -- policy's key does not name its window): the index counted shorter
    -- windows, and keeping it would keep the counts for ever. A fresh window.
    c, p = 0, 0
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
    return 0, remaining, reset_ms(c, p), math.ceil(retry) + 1
  end

  c = c + cost
  -- SET replaces the key whatever its type, so an old hash goes in this write.
  redis.call('SET', key, encode(cur, c, p), 'PX', 2 * window)
  local remaining = math.max(math.floor(limit - est - cost), 0)
  return 1, remaining, reset_ms(c, p), 0
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
