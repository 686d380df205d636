-- lib/multi.lua: one decision under several limits, all or nothing: the
-- decision of ratelimit_multi.lua, whose header describes each limit's
-- ARGV entries and the reply entries, and of each decision of
-- ratelimit_multi_batch.lua. Needs lib/clock.lua, lib/check.lua and the
-- algorithms' fragments (fixed_window, sliding_window, muldiv,
-- token_bucket).
--
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
  local checks = {}
  local all = true
  for i = 1, n do
    local b = a + 5 * i
    local alg = ARGV[b - 4]
    local need = cost
    if h then need = cost - tonumber(ARGV[h + i]) end
    local key = KEYS[k + i]
    local r
    if need <= 0 then
      r = {2, -1, -1, 0, function() return -1, -1, 0 end}
    elseif alg == 'fw' then
      r = {fixed_window(key, ARGV[b - 3], ARGV[b - 2], need, tonumber(ARGV[b - 1]))}
    elseif alg == 'cw' then
      local left = string.format('%d', tonumber(ARGV[b - 2]) - math.floor(now_ms))
      r = {fixed_window(key, ARGV[b - 3], left, need, nil, ARGV[b - 2])}
    elseif alg == 'sw' then
      r = {sliding_window(key, ARGV[b - 3], ARGV[b - 2], cost_arg)}
    else
      r = {token_bucket(key, ARGV[b - 3], ARGV[b - 2], ARGV[b - 1], cost_arg)}
    end
    if r[1] == 0 then
      if ARGV[b] == '1' then
        r[1] = 3
      else
        all = false
      end
    end
    r[6] = need
    checks[i] = r
  end

  for i = 1, n do
    local r = checks[i]
    local e = o + 5 * i
    if all and r[1] ~= 3 and peek then
      out[e - 4] = 1
      out[e - 3] = r[2]
      out[e - 2] = r[3]
      out[e - 1] = 0
      out[e] = 0
    elseif all and r[1] ~= 3 then
      local remaining, reset, granted = r[5]()
      out[e - 4] = 1
      out[e - 3] = remaining
      out[e - 2] = reset
      out[e - 1] = 0
      out[e] = granted or r[6]
    else
      out[e - 4] = r[1]
      out[e - 3] = r[2]
      out[e - 2] = r[3]
      out[e - 1] = r[4]
      out[e] = 0
    end
  end
end
