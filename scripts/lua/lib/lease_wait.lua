-- lib/lease_wait.lua: the waiters' part of acquire.lua and el_acquire.lua
-- (see their headers, which name the keys and ARGV it reads): expired
-- waiters dropped and the fair queue's head found (head), register() to
-- register (and, when fair, queue) the caller as a waiter, and
-- keepalive(fresh) to set up a keep-alive lease's deadline, heartbeat and
-- registry entry. Needs now_ms, ttl, fair and lib/lost.lua.
local present = redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[6], KEYS[6], KEYS[6])
local waiting, reasons = present % 3 > 0, present >= 3

-- Waiters: drop the ones past their deadline, and queue heads that are no
-- longer registered (departed or expired), so the queue never sticks.
local head = false
if waiting then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
  head = redis.call('LINDEX', KEYS[4], 0)
  while head and not redis.call('ZSCORE', KEYS[3], head) do
    redis.call('LPOP', KEYS[4])
    head = redis.call('LINDEX', KEYS[4], 0)
  end
end

-- register keeps the caller as a waiter (and in fair mode queued at the
-- tail) until its deadline. A waiter already registered keeps its place
-- and moves its deadline: each attempt of a wait renews the registration,
-- so that of a waiter whose process died lapses soon.
local function register()
  local timeout = tonumber(ARGV[5])
  if timeout <= 0 then
    return
  end
  local new = redis.call('ZADD', KEYS[3], now_ms + timeout, ARGV[1]) == 1
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  local keep = tonumber(last[2]) - now_ms + 1000
  redis.call('PEXPIRE', KEYS[3], keep)
  if fair then
    if new then
      redis.call('LREM', KEYS[4], 0, ARGV[1])
      redis.call('RPUSH', KEYS[4], ARGV[1])
    end
    redis.call('PEXPIRE', KEYS[4], keep)
  end
end

-- keepalive turns keep-alive on for a granted lease (new grant, or a
-- re-entry asking for it), or counts a re-entry as a heartbeat. It returns
-- the TTL to set (capped at the max-hold deadline), the deadline and the
-- heartbeat interval (0, 0 when the lease is not kept alive). fresh says
-- the lock hash was just created, so it has no keep-alive fields yet.
local function keepalive(fresh)
  local untl, hb
  if not fresh then
    local v = redis.call('HMGET', KEYS[1], 'ku', 'kh')
    untl, hb = tonumber(v[1]), tonumber(v[2]) or 0
  end
  if not untl then
    if ARGV[6] ~= '1' then
      return ttl, 0, 0
    end
    untl, hb = now_ms + tonumber(ARGV[7]), tonumber(ARGV[8])
    redis.call('HSET', KEYS[1], 'ku', untl, 'kh', hb)
    if reasons and not fresh then
      -- a new grant has already forgotten the token's loss reason
      lost_forget(KEYS[6], ARGV[1])
    end
  end
  redis.call('HSET', KEYS[1], 'kb', now_ms)
  local pttl = math.max(math.min(ttl, untl - now_ms), 1)
  if pttl < ttl then
    -- the max-hold deadline ends this lease; say so if it is not renewed by hand
    local fo = redis.call('HMGET', KEYS[1], 'f', 'o')
    lost_record(KEYS[6], ARGV[1], 'max_hold', untl, fo[1], fo[2], ARGV[10])
  end
  redis.call('ZADD', KEYS[5], math.min(now_ms + math.max(math.floor(ttl / 3), 1), untl), ARGV[9])
  return pttl, untl, hb
end

