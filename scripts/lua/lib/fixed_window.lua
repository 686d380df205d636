-- lib/fixed_window.lua: the fixed-window check (see lib/check.lua), the
-- classic INCR + EXPIRE counter. The counter is created by the first
-- allowed request of a window, which also sets its expiry, so the window
-- starts at that request and lasts exactly window_ms by the Redis clock.
-- Its PTTL is the time left in the window. Numbers reach redis.call as the
-- caller's strings (ARGV): a Lua number is formatted with printf's %.17g on
-- every call, which costs more than the command itself.
--
-- lease, when given and above the cost, grants a lease: the write counts up
-- to lease units (at most what the window has left) and returns how many as
-- a third value; otherwise it counts the cost.
--
-- expire_at, when given (a calendar window: window_arg is then the time
-- left in its period), is the window's end in Unix milliseconds: the
-- counter expires then (PEXPIREAT), exactly as the period ends.
local function fw_expire(key, window_arg, expire_at)
  if expire_at then
    redis.call('PEXPIREAT', key, expire_at)
  else
    redis.call('PEXPIRE', key, window_arg)
  end
end

-- fw_write counts what fixed_window allowed, from what it left in st.
local function fw_write(st)
  local key, cost, lease = st.key, st.cost, st.lease
  local grant = cost
  local n
  if lease and lease > cost then
    grant = math.min(lease, st.limit - st.count)
    n = redis.call('INCRBY', key, string.format('%d', grant))
  else
    n = redis.call('INCRBY', key, st.cost_arg)
  end
  local reset = st.ttl
  if n == grant then
    fw_expire(key, st.window_arg, st.expire_at)
    reset = tonumber(st.window_arg)
  end
  return st.limit - n, reset, grant
end

local function fixed_window(st, key, limit_arg, window_arg, cost_arg, lease, expire_at)
  local limit = tonumber(limit_arg)
  local cost = tonumber(cost_arg)

  local v = redis.call('GET', key)
  local count = v and tonumber(v) or 0
  local ttl = redis.call('PTTL', key)
  if count > 0 and ttl < 0 then
    -- A counter without expiry (someone else's SET): give it this window.
    fw_expire(key, window_arg, expire_at)
    ttl = tonumber(window_arg)
  end

  if count + cost > limit then
    if ttl < 0 then ttl = tonumber(window_arg) end
    -- The key expires once the Redis clock is past its expiry, so the first
    -- moment a retry surely finds a fresh window is one millisecond after it.
    return 0, math.max(limit - count, 0), ttl, ttl + 1
  end

  st.write = fw_write
  st.key = key
  st.limit = limit
  st.count = count
  st.cost = cost
  st.cost_arg = cost_arg
  st.ttl = ttl
  st.window_arg = window_arg
  st.lease = lease
  st.expire_at = expire_at
  return 2, limit - count, math.max(ttl, 0), 0
end
