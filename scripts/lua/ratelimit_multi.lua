-- ratelimit_multi: one decision under several limits at once (a policy's
-- "limits:" list), each limit on its own key and with its own algorithm:
-- the request is allowed only if every limit allows it, and then its cost is
-- counted by every limit; a denied request changes nothing in any of them.
-- Every limit is checked first, then, only if all allow, every one is
-- counted. Scripts cannot share code, so the three algorithms are those of
-- ratelimit_fixed_window.lua, ratelimit_sliding_window.lua and
-- ratelimit_token_bucket.lua, split into their check and their write; their
-- header comments describe the keys' values, which are the same here. The
-- clock is read from Redis TIME once per call.
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
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

local max_ahead = 315360000000000 -- 10 years of 365 days, in microseconds

-- Each check returns {status, remaining, reset_ms, retry_after_ms} as the
-- reply has them for a denial (status 0) or for a limit that would allow
-- but is not counted (status 2); the latter has a fifth entry, the write
-- that counts the request, which returns the remaining and reset_ms after
-- it.

-- fixed_window: ratelimit_fixed_window.lua's decide.
local function fixed_window(key, limit_arg, window_arg, cost_arg)
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
    return {0, math.max(limit - count, 0), ttl, ttl + 1}
  end

  return {2, limit - count, math.max(ttl, 0), 0, function()
    local n = redis.call('INCRBY', key, cost_arg)
    local reset = ttl
    if n == cost then
      redis.call('PEXPIRE', key, window_arg)
      reset = tonumber(window_arg)
    end
    return limit - n, reset
  end}
end

-- sliding_window: ratelimit_sliding_window.lua's decide.
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

local function sliding_window(key, limit_arg, window_arg, cost_arg)
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

  return {2, math.max(math.floor(limit - est), 0), reset_ms(c, p), 0, function()
    local cc = c + cost
    -- SET replaces the key whatever its type, so an old hash goes in this write.
    redis.call('SET', key, encode(cur, cc, p), 'PX', 2 * window)
    return math.max(math.floor(limit - est - cost), 0), reset_ms(cc, p)
  end}
end

-- divmod returns floor(n / d) and n mod d for integers 0 <= n and
-- 1 <= d with n + d <= 2^53: the rounded quotient is corrected.
local function divmod(n, d)
  local q = math.floor(n / d)
  local r = n - q * d
  if r < 0 then return q - 1, r + d end
  if r >= d then return q + 1, r - d end
  return q, r
end

-- muldiv returns floor((x * y + a) / z) and the remainder, exactly, for
-- integers x, y, a >= 0 with a < 2^52 and 1 <= z < 2^50 (the bounds on limit
-- and window keep z there) whose quotient is below 2^53. Past 2^52 it
-- multiplies by the digits of x in base b, a power of two with b * z < 2^51,
-- one at a time: every partial sum stays below 2^52.
local function muldiv(x, y, a, z)
  local n = x * y + a
  if n < 4503599627370496 then return divmod(n, z) end
  local yq, yr = divmod(y, z) -- x * y = x * yq * z + x * yr
  local q0 = x * yq
  local _, e = math.frexp(z) -- z < 2^e
  local b = math.ldexp(1, 51 - e)
  local p = 1
  while p * b <= x do p = p * b end
  local q, r = 0, 0 -- x's digits so far, times yr, are q * z + r
  while p >= 1 do
    local digit = math.floor(x / p)
    x = x - digit * p
    local tq, tr = divmod(r * b + digit * yr, z)
    q = q * b + tq
    r = tr
    p = p / b
  end
  local aq, ar = divmod(r + a, z)
  return q0 + q + aq, ar
end


-- token_bucket: ratelimit_token_bucket.lua's decide.
local function token_bucket(key, limit_arg, window_arg, burst_arg, cost_arg)
  local limit = tonumber(limit_arg)
  local window = tonumber(window_arg) * 1000 -- microseconds
  local burst = tonumber(burst_arg)
  local cost = tonumber(cost_arg)

  -- A tick is 1/unit µs and a token takes interval ticks (see above).
  local unit, interval = limit, window
  if limit > 1000 and window * 1000 >= limit then
    unit = 1000
    interval = (muldiv(window, 1000, limit - 1, limit))
  end

  -- A time span is (us, ticks). sub returns a - b, for a >= b.
  local function sub(a_us, a_ticks, b_us, b_ticks)
    if a_ticks < b_ticks then return a_us - b_us - 1, a_ticks - b_ticks + unit end
    return a_us - b_us, a_ticks - b_ticks
  end

  -- ms returns a span in milliseconds, rounded up.
  local function ms(us, ticks)
    if ticks > 0 then us = us + 1 end
    return math.ceil(us / 1000)
  end

  -- tokens returns the whole tokens in a span: floor(span / interval).
  local function tokens(us, ticks)
    return (muldiv(us, unit, ticks, interval))
  end

  local tol_us, tol_ticks = muldiv(burst, interval, 0, unit) -- how far the TAT may run ahead of now
  local step_us, step_ticks = muldiv(cost, interval, 0, unit) -- what this request takes

  -- off: how far the stored TAT is ahead of now; 0 for a full bucket.
  local off_us, off_ticks = 0, 0
  local v = redis.call('GET', key) or ''
  -- Nanoseconds (18 digits or more): µs, and the last 3 digits.
  local int, frac = string.match(v, '^(%d+)(%d%d%d)$')
  if int and #int >= 15 then
    off_us = tonumber(int) - now_us
    -- The last tick at or before it: a TAT rounded up to the ns comes back
    -- exactly when a tick is 1 ns or more (unit <= 1000).
    if unit <= 1000 then
      off_ticks = math.floor(tonumber(frac) * unit / 1000)
    else
      off_ticks = (muldiv(tonumber(frac), unit, 0, 1000))
    end
  else
    -- Microseconds, an integer or a decimal read to the nearest tick.
    int, frac = string.match(v, '^(%d+)%.?(%d*)$')
    if int then
      off_us = tonumber(int) - now_us
      if frac ~= '' then
        off_ticks = math.floor(tonumber(frac) * unit / 10 ^ #frac + 0.5)
        if off_ticks >= unit then
          off_us = off_us + 1
          off_ticks = 0
        end
      end
    end
  end
  if off_us < 0 or (off_us > max_ahead and off_us > tol_us) then
    off_us = 0 -- in the past (a full bucket), or too far ahead
    off_ticks = 0
  end

  local new_us = off_us + step_us
  local new_ticks = off_ticks + step_ticks
  if new_ticks >= unit then
    new_us = new_us + 1
    new_ticks = new_ticks - unit
  end

  if new_us > tol_us or (new_us == tol_us and new_ticks > tol_ticks) then
    local remaining = 0
    if off_us < tol_us or (off_us == tol_us and off_ticks <= tol_ticks) then
      remaining = tokens(sub(tol_us, tol_ticks, off_us, off_ticks))
    end
    return {0, remaining, ms(off_us, off_ticks), ms(sub(new_us, new_ticks, tol_us, tol_ticks)) + 1}
  end

  local now_remaining = 0
  if off_us < tol_us or (off_us == tol_us and off_ticks <= tol_ticks) then
    now_remaining = tokens(sub(tol_us, tol_ticks, off_us, off_ticks))
  end
  return {2, now_remaining, ms(off_us, off_ticks), 0, function()
  -- The TAT in nanoseconds, the part below 1 ns rounded up.
  local tat_us = now_us + new_us
  local tat_ns
  if unit <= 1000 then
    tat_ns = math.ceil(new_ticks * 1000 / unit)
  else
    tat_ns = (muldiv(new_ticks, 1000, unit - 1, unit))
  end
  if tat_ns == 1000 then
    tat_us = tat_us + 1
    tat_ns = 0
  end
  local reset = ms(new_us, new_ticks)
  redis.call('SET', key, string.format('%d%03d', tat_us, tat_ns), 'PX', string.format('%d', reset))
  return tokens(sub(tol_us, tol_ticks, new_us, new_ticks)), reset
  end}
end

local cost_arg = ARGV[1]
local checks = {}
local all = true
for i = 1, #KEYS do
  local a = 4 * i + 1
  local alg = ARGV[a - 3]
  local r
  if alg == 'fw' then
    r = fixed_window(KEYS[i], ARGV[a - 2], ARGV[a - 1], cost_arg)
  elseif alg == 'sw' then
    r = sliding_window(KEYS[i], ARGV[a - 2], ARGV[a - 1], cost_arg)
  else
    r = token_bucket(KEYS[i], ARGV[a - 2], ARGV[a - 1], ARGV[a], cost_arg)
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
