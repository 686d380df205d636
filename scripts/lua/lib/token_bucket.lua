-- lib/token_bucket.lua: the token-bucket check (see lib/check.lua), GCRA;
-- ratelimit_token_bucket.lua's header describes the arithmetic and the
-- key's value. Needs now_us (lib/clock.lua) and muldiv (lib/muldiv.lua).

local max_ahead = 315360000000000 -- 10 years of 365 days, in microseconds

-- A time span is (us, ticks), a tick 1/unit µs. tb_sub returns a - b, for
-- a >= b.
local function tb_sub(unit, a_us, a_ticks, b_us, b_ticks)
  if a_ticks < b_ticks then return a_us - b_us - 1, a_ticks - b_ticks + unit end
  return a_us - b_us, a_ticks - b_ticks
end

-- tb_ms returns a span in milliseconds, rounded up.
local function tb_ms(us, ticks)
  if ticks > 0 then us = us + 1 end
  return math.ceil(us / 1000)
end

-- tb_tokens returns the whole tokens in a span of tokens of interval ticks:
-- floor(span / interval).
local function tb_tokens(unit, interval, us, ticks)
  return (muldiv(us, unit, ticks, interval))
end

-- tb_write counts what token_bucket allowed, from what it left in st.
local function tb_write(st)
  local unit, new_us, new_ticks = st.unit, st.new_us, st.new_ticks
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
  local reset = tb_ms(new_us, new_ticks)
  redis.call('SET', st.key, string.format('%d%03d', tat_us, tat_ns), 'PX', string.format('%d', reset))
  return tb_tokens(unit, st.interval, tb_sub(unit, st.tol_us, st.tol_ticks, new_us, new_ticks)), reset
end

-- tb_params puts in st what token_bucket derives from its arguments alone
-- (the tick, a token's ticks, the tolerance and the request's step), once
-- for the decisions of a call that reuse st with the same arguments: the
-- decisions of one policy, most of a batch.
local function tb_params(st, limit_arg, window_arg, burst_arg, cost_arg)
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

  local tol_us, tol_ticks = muldiv(burst, interval, 0, unit) -- how far the TAT may run ahead of now
  local step_us, step_ticks = muldiv(cost, interval, 0, unit) -- what this request takes
  -- One assignment each: gopher-lua (the embedded store) gets a multiple
  -- assignment of table fields wrong.
  st.tb_unit = unit
  st.tb_interval = interval
  st.tb_tol_us = tol_us
  st.tb_tol_ticks = tol_ticks
  st.tb_step_us = step_us
  st.tb_step_ticks = step_ticks
  st.tb_limit_arg = limit_arg
  st.tb_window_arg = window_arg
  st.tb_burst_arg = burst_arg
  st.tb_cost_arg = cost_arg
end

local function token_bucket(st, key, limit_arg, window_arg, burst_arg, cost_arg)
  if st.tb_limit_arg ~= limit_arg or st.tb_window_arg ~= window_arg or st.tb_burst_arg ~= burst_arg
    or st.tb_cost_arg ~= cost_arg then
    tb_params(st, limit_arg, window_arg, burst_arg, cost_arg)
  end
  local unit = st.tb_unit
  local interval = st.tb_interval
  local tol_us = st.tb_tol_us
  local tol_ticks = st.tb_tol_ticks
  local step_us = st.tb_step_us
  local step_ticks = st.tb_step_ticks

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

  local within = off_us < tol_us or (off_us == tol_us and off_ticks <= tol_ticks)
  if new_us > tol_us or (new_us == tol_us and new_ticks > tol_ticks) then
    local remaining = 0
    if within then
      remaining = tb_tokens(unit, interval, tb_sub(unit, tol_us, tol_ticks, off_us, off_ticks))
    end
    return 0, remaining, tb_ms(off_us, off_ticks), tb_ms(tb_sub(unit, new_us, new_ticks, tol_us, tol_ticks)) + 1
  end

  local now_remaining = 0
  if within then
    now_remaining = tb_tokens(unit, interval, tb_sub(unit, tol_us, tol_ticks, off_us, off_ticks))
  end
  st.write = tb_write
  st.key = key
  st.unit = unit
  st.interval = interval
  st.new_us = new_us
  st.new_ticks = new_ticks
  st.tol_us = tol_us
  st.tol_ticks = tol_ticks
  return 2, now_remaining, tb_ms(off_us, off_ticks), 0
end
