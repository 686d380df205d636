-- ratelimit_token_bucket: a token bucket as GCRA (the generic cell rate
-- algorithm), as in redis_rate. The bucket refills at limit tokens per
-- window and holds at most burst tokens. Its whole state is one number, the
-- theoretical arrival time (TAT) by the Redis clock: when the bucket will be
-- full again. Denied requests change nothing.
--
-- The arithmetic is exact but for the rounding up below, which never lets
-- a token out early. Lua numbers (doubles) hold integers exactly only below
-- 2^53, with the clock alone near 2^51 µs, so a span of time is kept as
-- whole microseconds plus ticks of 1/unit microsecond (0 <= ticks < unit),
-- and products that may pass 2^52 go through muldiv. A token takes interval
-- ticks; the stored TAT is rounded up to a whole ns:
--   limit <= 1000             unit = limit, interval = the window in µs:
--                             exactly window / limit, and a tick (>= 1 ns)
--                             comes back exactly from the stored TAT
--   limit > 1000, window /    unit = 1000 (a tick is 1 ns), interval =
--   limit >= 1 ns             window / limit rounded up to a whole ns: less
--                             than 1 ns a token more
--   window / limit < 1 ns     unit = limit as for limit <= 1000, but a TAT
--                             read back can be up to 1 ns later: less than
--                             1 ns a request more
-- While a token takes 1 ns or more, counts come out whole (a full bucket of
-- 7 per 10s allows exactly 7, leaving 6, 5, ... 0), and an interval far
-- below a microsecond (10 million per second) still counts.
--
-- One call decides n >= 1 requests, one after the other, each on its own
-- key: concurrent requests are sent to Redis together in one call. They
-- share one reading of the Redis clock.
--
-- KEYS[i]  the TAT; expires when the bucket is full again. An integer of
--          absolute nanoseconds, rounded up to a whole ns: 19 digits and
--          below 2^63 until 2262, so Redis keeps it in the key itself (about
--          30 bytes less per key than a string). It is written as whole µs
--          and 3 digits of ns, and read by splitting off the last 3 digits,
--          never as one Lua number. The microsecond forms of earlier
--          versions are still read, told apart by their form:
--            integer  18 digits or more (>= 1e17): nanoseconds (as µs it
--                     would be over 3000 years ahead, which only versions
--                     before the 10-year bound wrote, for refills that long)
--            integer  up to 17 digits: whole µs
--            decimal  "µs.fraction" (a '.' in it): the fraction has one
--                     digit more than limit, read to the nearest tick
--          Any other value, or a TAT more than 10 years ahead (no valid
--          limit leads there; earlier versions could overflow) and more
--          than a full bucket ahead, counts as no key.
-- ARGV[4i-3]  limit: tokens added per window, 1 <= limit < 2^48
-- ARGV[4i-2]  window in milliseconds, 1 <= window <= 10 years
-- ARGV[4i-1]  burst: bucket capacity, >= 1, with window * burst / limit (the
--             time to refill an empty bucket) <= 10 years
-- ARGV[4i]    cost of request i, 1 <= cost <= burst
--
-- Reply: four entries per request, in order: allowed, remaining, reset_ms,
-- retry_after_ms
--   allowed         1 = allowed (tokens taken), 0 = denied (nothing taken)
--   remaining       whole tokens left in the bucket after this decision
--   reset_ms        time until the bucket is full again (rounded up; >= 1
--                   when allowed, and the key's expiry)
--   retry_after_ms  0 when allowed; else when enough tokens for the same
--                   request will be in the bucket (rounded up, plus 1 ms)
-- A request whose key cannot be used answers -1 and the error's text in its
-- first two entries; the others are decided as usual.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local max_ahead = 315360000000000 -- 10 years of 365 days, in microseconds

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

-- decide returns the four entries of one request.
local function decide(key, limit_arg, window_arg, burst_arg, cost_arg)
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
    off_us = tonumber(int) - now
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
      off_us = tonumber(int) - now
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
    return 0, remaining, ms(off_us, off_ticks), ms(sub(new_us, new_ticks, tol_us, tol_ticks)) + 1
  end

  -- The TAT in nanoseconds, the part below 1 ns rounded up.
  local tat_us = now + new_us
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
  return 1, tokens(sub(tol_us, tol_ticks, new_us, new_ticks)), reset, 0
end

local out = {}
for i = 1, #KEYS do
  local a = 4 * i
  local ok, allowed, remaining, reset, retry = pcall(decide, KEYS[i], ARGV[a - 3], ARGV[a - 2], ARGV[a - 1], ARGV[a])
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
