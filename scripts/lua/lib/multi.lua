-- lib/multi.lua: one decision under several limits, all or nothing: the
-- decision of ratelimit_multi.lua, whose header describes each limit's
-- ARGV entries and the reply entries, and of each decision of
-- ratelimit_multi_batch.lua. Needs lib/clock.lua, lib/check.lua and the
-- algorithms' fragments (fixed_window, sliding_window, muldiv,
-- token_bucket).

-- held_write is the write of a limit whose units the instance holds (need
-- <= 0): it reads and counts nothing.
local function held_write(st)
  return -1, -1, 0
end

-- limit_states holds one state table per limit position (see
-- lib/check.lua), reused by every decision of the call.
local limit_states = {}

-- decide_limits decides one request under n limits: limit i's key is
-- KEYS[k+i]; the units of it held from a lease are ARGV[h+i] (h nil: none
-- held, as without a lease); its five entries (algorithm, limit, window,
-- burst or lease or the period's start, shadow) are ARGV[a+5i-4 .. a+5i];
-- cost_arg is the request's cost. With peek it writes nothing. It puts the
-- decision's five reply entries per limit in out[o+1 .. o+5n]. Every limit
-- is checked first, then, only if every enforced one allows, every one is
-- counted: a key that cannot be used raises in the checks, before anything
-- of the decision is written.
local function decide_limits(n, k, h, a, cost_arg, peek, out, o)
  local cost = tonumber(cost_arg)
  local all = true
  for i = 1, n do
    local st = limit_states[i]
    if not st then
      st = {}
      limit_states[i] = st
    end
    local b = a + 5 * i
    local alg = ARGV[b - 4]
    local need = cost
    if h then need = cost - tonumber(ARGV[h + i]) end
    local key = KEYS[k + i]
    local status, remaining, reset, retry
    if need <= 0 then
      status, remaining, reset, retry = 2, -1, -1, 0
      st.write = held_write
    elseif alg == 'fw' then
      status, remaining, reset, retry = fixed_window(st, key, ARGV[b - 3], ARGV[b - 2], need, tonumber(ARGV[b - 1]))
    elseif alg == 'cw' then
      local left = string.format('%d', tonumber(ARGV[b - 2]) - math.floor(now_ms))
      status, remaining, reset, retry = fixed_window(st, key, ARGV[b - 3], left, need, nil, ARGV[b - 2])
    elseif alg == 'sw' then
      status, remaining, reset, retry = sliding_window(st, key, ARGV[b - 3], ARGV[b - 2], cost_arg)
    else
      status, remaining, reset, retry = token_bucket(st, key, ARGV[b - 3], ARGV[b - 2], ARGV[b - 1], cost_arg)
    end
    if status == 0 then
      if ARGV[b] == '1' then
        status = 3
      else
        all = false
      end
    end
    st.status = status
    st.remaining = remaining
    st.reset = reset
    st.retry = retry
    st.need = need
  end

  for i = 1, n do
    local st = limit_states[i]
    local e = o + 5 * i
    local status = st.status
    if all and status ~= 3 and peek then
      out[e - 4] = 1
      out[e - 3] = st.remaining
      out[e - 2] = st.reset
      out[e - 1] = 0
      out[e] = 0
    elseif all and status ~= 3 then
      local remaining, reset, granted = st.write(st)
      out[e - 4] = 1
      out[e - 3] = remaining
      out[e - 2] = reset
      out[e - 1] = 0
      out[e] = granted or st.need
    else
      out[e - 4] = status
      out[e - 3] = st.remaining
      out[e - 2] = st.reset
      out[e - 1] = st.retry
      out[e] = 0
    end
  end
end
