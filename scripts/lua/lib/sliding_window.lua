-- lib/sliding_window.lua: the sliding-window check (see lib/check.lua), the
-- two-counter approximation; ratelimit_sliding_window.lua's header describes
-- the key's value. Needs now_ms (lib/clock.lua).
-- decode returns w, c and p from either string form, or nil.
local function decode(v)
  if string.find(v, ':', 1, true) then
    local w, c, p = string.match(v, '^(%d+):(%d+):(%d+)$')
    if w then return tonumber(w), tonumber(c), tonumber(p) end
    return nil
  end
  if not string.match(v, '^%d+$') then return nil end
  local n = tonumber(string.sub(v, -1))
  if n < 1 or #v < 2 * n + 2 then return nil end
  return tonumber(string.sub(v, 1, -2 * n - 2)), tonumber(string.sub(v, -2 * n - 1, -n - 2)),
    tonumber(string.sub(v, -n - 1, -2))
end

-- encode returns the integer form, or the text form from 9e18 on, where the
-- integer may not fit Redis's signed 64 bits (at most 9.22e18). Redis would
-- keep such a number as a string anyway, and the text is about as long.
-- The call's formats by digit count, built once each.
local sw_formats = {}

local function encode(w, c, p)
  local n = #string.format('%d', math.max(c, p))
  local f = sw_formats[n]
  if not f then
    f = '%d%0' .. n .. 'd%0' .. n .. 'd%d'
    sw_formats[n] = f
  end
  local s = string.format(f, w, c, p, n)
  if #s < 19 or (#s == 19 and tonumber(s) < 9e18) then return s end
  return string.format('%d:%d:%d', w, c, p)
end

-- sw_reset is the time until the full limit is back, elapsed into the
-- current window, with counts cc (current) and pp (previous).
local function sw_reset(window, elapsed, cc, pp)
  if cc > 0 then return math.ceil(2 * window - elapsed) end
  if pp > 0 then return math.ceil(window - elapsed) end
  return 0
end

-- sw_write counts what sliding_window allowed, from what it left in st.
local function sw_write(st)
  local cost, p, window = st.cost, st.p, st.window
  local cc = st.c + cost
  -- SET replaces the key whatever its type, so an old hash goes in this write.
  redis.call('SET', st.key, encode(st.cur, cc, p), 'PX', 2 * window)
  return math.max(math.floor(st.limit - st.est - cost), 0), sw_reset(window, st.elapsed, cc, p)
end

-- sliding_window is the check (see lib/check.lua).
local function sliding_window(st, key, limit_arg, window_arg, cost_arg)
  local limit = tonumber(limit_arg)
  local window = tonumber(window_arg)
  local cost = tonumber(cost_arg)
  local cur = math.floor(now_ms / window)
  local elapsed = now_ms - cur * window

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
    return 0, remaining, sw_reset(window, elapsed, c, p), math.ceil(retry) + 1
  end

  st.write = sw_write
  st.key = key
  st.limit = limit
  st.window = window
  st.cost = cost
  st.cur = cur
  st.elapsed = elapsed
  st.c = c
  st.p = p
  st.est = est
  return 2, math.max(math.floor(limit - est), 0), sw_reset(window, elapsed, c, p), 0
end
