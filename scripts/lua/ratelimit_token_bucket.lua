-- ratelimit_token_bucket: a token bucket as GCRA (the generic cell rate
-- algorithm), as in redis_rate. The bucket refills at limit tokens per
-- window and holds at most burst tokens. Its whole state is one number, the
-- theoretical arrival time (TAT), in microseconds by the Redis clock: when
-- the bucket will be full again. Denied requests change nothing.
--
-- The arithmetic is exact. A token takes window / limit microseconds, rarely
-- a whole number, and Lua numbers (doubles) hold integers exactly only below
-- 2^53, with the clock alone near 2^51. So a span of time is kept as whole
-- microseconds plus ticks of 1/limit microsecond (0 <= ticks < limit), and
-- products that may pass 2^52 go through muldiv. Counts come out whole (a
-- full bucket of 7 per 10s allows exactly 7, leaving 6, 5, ... 0), and an
-- interval far below a microsecond (10 million per second) still counts.
--
-- KEYS[1]  the TAT; expires when the bucket is full again. Two forms:
--            integer  whole microseconds, as earlier versions wrote it;
--                     Redis keeps an integer in the key itself (about 30
--                     bytes less per key)
--            decimal  "µs.fraction" when the TAT falls between two
--                     microseconds (window / limit is not whole): the
--                     fraction has one digit more than limit, enough to
--                     recover the ticks exactly; earlier versions read it as
--                     a number too
--          Any other value, or a TAT more than 10 years ahead (no valid
--          limit leads there; earlier versions could overflow), counts as no
--          key.
-- ARGV[1]  limit: tokens added per window, 1 <= limit < 2^48
-- ARGV[2]  window in milliseconds, 1 <= window <= 10 years
-- ARGV[3]  burst: bucket capacity, >= 1, with window * burst / limit (the
--          time to refill an empty bucket) <= 10 years
-- ARGV[4]  cost of this request, 1 <= cost <= burst
--
-- Reply: {allowed, remaining, reset_ms, retry_after_ms}
--   allowed         1 = allowed (tokens taken), 0 = denied (nothing taken)
--   remaining       whole tokens left in the bucket after this decision
--   reset_ms        time until the bucket is full again (rounded up; >= 1
--                   when allowed, and the key's expiry)
--   retry_after_ms  0 when allowed; else when enough tokens for the same
--                   request will be in the bucket (rounded up, plus 1 ms)
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2]) * 1000 -- microseconds; a token is window ticks
local burst = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

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

-- A time span is (us, ticks). sub returns a - b, for a >= b.
local function sub(a_us, a_ticks, b_us, b_ticks)
  if a_ticks < b_ticks then return a_us - b_us - 1, a_ticks - b_ticks + limit end
  return a_us - b_us, a_ticks - b_ticks
end

-- ms returns a span in milliseconds, rounded up.
local function ms(us, ticks)
  if ticks > 0 then us = us + 1 end
  return math.ceil(us / 1000)
end

-- tokens returns the whole tokens in a span: floor(span / (window / limit)).
local function tokens(us, ticks)
  return (muldiv(us, limit, ticks, window))
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tol_us, tol_ticks = muldiv(burst, window, 0, limit) -- how far the TAT may run ahead of now
local step_us, step_ticks = muldiv(cost, window, 0, limit) -- what this request takes

-- off: how far the stored TAT is ahead of now; 0 for a full bucket.
local off_us, off_ticks = 0, 0
local v = redis.call('GET', KEYS[1])
local int, frac = string.match(v or '', '^(%d+)%.?(%d*)$')
if int then
  off_us = tonumber(int) - now
  if frac ~= '' then
    off_ticks = math.floor(tonumber(frac) * limit / 10 ^ #frac + 0.5)
    if off_ticks >= limit then
      off_us = off_us + 1
      off_ticks = 0
    end
  end
  if off_us < 0 or off_us > max_ahead then
    off_us = 0
    off_ticks = 0
  end
end

local new_us = off_us + step_us
local new_ticks = off_ticks + step_ticks
if new_ticks >= limit then
  new_us = new_us + 1
  new_ticks = new_ticks - limit
end

if new_us > tol_us or (new_us == tol_us and new_ticks > tol_ticks) then
  local remaining = 0
  if off_us < tol_us or (off_us == tol_us and off_ticks <= tol_ticks) then
    remaining = tokens(sub(tol_us, tol_ticks, off_us, off_ticks))
  end
  return {0, remaining, ms(off_us, off_ticks), ms(sub(new_us, new_ticks, tol_us, tol_ticks)) + 1}
end

-- The TAT as a string, in the integer form when it is whole; else with
-- new_ticks / limit to #ARGV[1] + 1 decimals, trailing zeros dropped.
local tat = string.format('%d', now + new_us)
if new_ticks > 0 then
  local scale = 10 ^ (#ARGV[1] + 1)
  local f = math.floor(new_ticks * scale / limit + 0.5)
  while f % 10 == 0 do
    f = f / 10
    scale = scale / 10
  end
  tat = tat .. '.' .. string.format('%d', scale + f):sub(2)
end
local reset = ms(new_us, new_ticks)
redis.call('SET', KEYS[1], tat, 'PX', string.format('%d', reset))
return {1, tokens(sub(tol_us, tol_ticks, new_us, new_ticks)), reset, 0}
