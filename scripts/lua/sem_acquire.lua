-- sem_acquire: take count permits of a semaphore as one lease under its own
-- token. The first acquisition (or the admin's PUT) sets the capacity; a
-- request naming another capacity is refused. A caller that is willing to
-- wait is registered as a waiter when not enough permits are free; in fair
-- mode it also joins the FIFO queue, and only the queue's head may take
-- permits, so a large request is never overtaken by small ones.
--
-- KEYS[1]  capacity hash: p permits (N), f last fence issued, m "1" when
--          the last grant or waiter was fair (absent when it was plain);
--          every grant keeps it for at least the lease's span (its TTL, or
--          for a keep-alive lease its max hold) and the fence retention
--          (ARGV[3]) after it, a waiter for its wait and the retention. When
--          the scripts last set it to expire is kept in the leases hash
--          ('#c', lib/sem.lua) while there is one. The versions before this
--          one wrote m "0" for plain, and the last one that expiry in a
--          field x: the next grant drops both (lib/sem.lua tells a legacy
--          leases hash by them)
-- KEYS[2]  leases hash: token -> "count:expiry:fence:ttl_ms:ku:kh:kb:owner",
--          with the permits in use, a bound on the earliest expiry, the
--          capacity and the two keys' expiries (lib/sem.lua): the leases
--          past their expiry are dropped, and their permits return at once,
--          before anything is decided. It is kept for at least the lease's
--          span
-- KEYS[3]  waiters zset: member = waiter token, score = its deadline (ms)
-- KEYS[4]  fair queue list: tokens of fair waiters in arrival order
-- KEYS[5]  keep-alive registry (zset: member -> next renewal due, ms)
-- KEYS[6]  lost-lease reasons of this semaphore (hash: token -> reason)
-- KEYS[7]  pub/sub channel that waiters of this semaphore listen on: every
--          grant publishes "acquired:<fence>:<ttl_ms>:<available>" on it,
--          the lease's fence, its TTL from the grant and the permits left
--          free (0 when none, or fewer than none), so waiters whose counts
--          fit in what is left try for it, a waiter told to re-check later
--          learns when this lease ends (an expiry publishes nothing), and
--          every watcher sees the acquisition
-- ARGV[1]  token (base64url)
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  fence retention in milliseconds: how long the capacity record
--          outlives the last lease it fenced
-- ARGV[4]  mode: "1" fair, "0" plain
-- ARGV[5]  waiter timeout in milliseconds: when > 0 and the permits are not
--          granted, the caller stays registered as a waiter until now + this
--          (0: try once, register nothing)
-- ARGV[6]  "1" to keep the lease alive (renewed by the service), else "0"
-- ARGV[7]  keep-alive max hold in milliseconds (the lease ends at grant + max hold)
-- ARGV[8]  keep-alive heartbeat interval in milliseconds, 0 for none
-- ARGV[9]  keep-alive registry member of the lease
-- ARGV[10] how long lost-lease reasons are kept, in milliseconds
-- ARGV[11] owner text of the lease, "" for none
-- ARGV[12] permits: the capacity N the caller expects
-- ARGV[13] count: the permits this lease takes (1 <= count <= N)
-- ARGV[14] "1" when the service made the token for this acquire and no
--          attempt under it ran before: it is no waiter and has no
--          lost-lease reason, so a grant looks for neither
--
-- Reply: {status, fence, ttl_ms, now_ms, recheck_ms, fair, ka_until_ms,
--         ka_heartbeat_ms, permits, available}
--   status 1 = granted,
--          0 = not granted: fewer than count permits are free, or (fair
--              mode) another waiter is first in the queue,
--         -3 = mode mismatch: the semaphore is fair and the caller is not,
--              or the other way round (fair says which),
--         -4 = permits mismatch: the stored capacity differs (permits is it),
--         -5 = the token already holds a lease on this semaphore
--   permits is the stored capacity, available the permits free after this
--   call (negative when the admin lowered N below the permits in use).
--   When not granted, recheck_ms is the latest time to try again without a
--   wake-up: until the first lease expires (or sooner: the bound on it that
--   the leases hash keeps), or the queue head's deadline.
-- A grant's fence is max(last fence + 1, Redis TIME in µs), as acquire.lua's.
--#include lib/lost.lua
--#include lib/sem.lua
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tok, fair = ARGV[1], ARGV[4] == '1'
local n, count = tonumber(ARGV[12]), tonumber(ARGV[13])
local ret = tonumber(ARGV[3])
local cap = redis.call('HMGET', KEYS[1], 'p', 'f', 'm', 'x')
local stored = tonumber(cap[1])
local held_fair = cap[3] == '1'
if stored and stored ~= n then
  return {-4, 0, 0, now_ms, 0, held_fair and 1 or 0, 0, 0, stored, 0}
end

local r = redis.call('HMGET', KEYS[2], '#u', '#e', '#x', '#c', '#p', tok)
-- One EXISTS says which of the keys a grant cleans up after are there, as
-- lib/lease_wait.lua's does: the waiters zset and the fair queue count 1
-- each, the lost-lease reasons, named three times, 3, and the leases hash,
-- named six times, 6. It is asked first when the hash may be legacy: it
-- has no '#u' while the capacity record has an m and no x, as a legacy
-- one's has (lib/sem.lua); else before the grant of a token that is not
-- fresh (ARGV[14]). waiting is nil until it is asked.
local fresh = ARGV[14] == '1'
local waiting, reasons
if not r[1] and cap[3] and not cap[4] then
  local k = KEYS[2]
  local present = redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[6], KEYS[6], KEYS[6], k, k, k, k, k, k)
  waiting, reasons = present % 3 > 0, present % 6 >= 3
  if present >= 6 and sem_scan().upgrade(k, now_ms) then
    r = redis.call('HMGET', k, '#u', '#e', '#x', '#c', '#p', tok)
  end
end
local u, e, v = tonumber(r[1]) or 0, tonumber(r[2]), r[6]
local x_at, c_at, p_at = tonumber(r[3]), tonumber(r[4]), r[5]
-- Leases past their expiry give their permits back.
if e and e <= now_ms then
  u, e, v = sem_scan().prune(KEYS[2], tok, now_ms)
  if u == 0 then
    x_at, c_at, p_at = nil, nil, nil -- the hash went, and what it knew
  end
end
if v then
  return {-5, 0, 0, now_ms, 0, held_fair and 1 or 0, 0, 0, n, 0}
end
if held_fair ~= fair and (u > 0 or (waiting ~= false and redis.call('ZCOUNT', KEYS[3], '(' .. now_ms, '+inf') > 0)) then
  return {-3, 0, 0, now_ms, 0, held_fair and 1 or 0, 0, 0, n, 0}
end
-- '#c' is the capacity record's expiry only while both keys are kept. Beside
-- a hash with no '#c', a record the last layout wrote says it in x, which a
-- grant moves to '#c' (x is only out of date once the last lease's release
-- has deleted the hash)
local c_in = c_at ~= nil
if not stored then
  c_at, c_in = nil, false
elseif not c_at and r[1] then
  c_at = tonumber(cap[4])
end

-- Fair mode: the queue's head, once the heads no longer registered
-- (departed or past their deadline) are dropped, so the queue never
-- sticks. In plain mode no fair waiter is registered (the mode check).
local head, head_until
if fair and waiting ~= false then
  head = redis.call('LINDEX', KEYS[4], 0)
  while head do
    head_until = tonumber(redis.call('ZSCORE', KEYS[3], head))
    if head_until and head_until > now_ms then
      break
    end
    redis.call('LPOP', KEYS[4])
    head = redis.call('LINDEX', KEYS[4], 0)
  end
end

local available = n - u
if available < count or (head and head ~= tok) then
  -- the first lease to expire frees permits; a queue head that goes away
  -- lets the next one in
  local recheck = -1
  if e then
    recheck = e - now_ms
  end
  if head and head ~= tok then
    local d = head_until - now_ms
    if recheck < 0 or d < recheck then
      recheck = d
    end
  end
  local timeout = tonumber(ARGV[5])
  if timeout > 0 then
    -- a waiter already registered keeps its place and moves its deadline;
    -- one past its deadline is gone, and comes back as a new one
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
    local new = redis.call('ZADD', KEYS[3], now_ms + timeout, tok) == 1
    local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    local keep = tonumber(last[2]) - now_ms + 1000
    redis.call('PEXPIRE', KEYS[3], keep)
    if fair then
      if new then redis.call('RPUSH', KEYS[4], tok) end
      redis.call('PEXPIRE', KEYS[4], keep)
    end
    -- a waiter sets the capacity and the mode as a holder does
    if fair and (not stored or cap[3] ~= '1') then
      redis.call('HSET', KEYS[1], 'p', ARGV[12], 'm', '1')
    elseif not fair and not stored then
      redis.call('HSET', KEYS[1], 'p', ARGV[12])
    end
    if not fair and cap[3] then
      redis.call('HDEL', KEYS[1], 'm')
    end
    local cx, later = sem_until(c_at, now_ms + timeout + ret)
    if later then
      redis.call('PEXPIRE', KEYS[1], cx - now_ms)
      if u > 0 then
        redis.call('HSET', KEYS[2], '#c', cx)
      end
    end
  end
  return {0, 0, 0, now_ms, recheck, fair and 1 or 0, 0, 0, n, available}
end

-- Granted.
if fresh then
  waiting, reasons = false, false
elseif waiting == nil then
  local present = redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[6], KEYS[6], KEYS[6])
  waiting, reasons = present % 3 > 0, present >= 3
end
if head then
  redis.call('LPOP', KEYS[4])
end
if waiting then
  redis.call('ZREM', KEYS[3], tok)
end
local granted = t[1] .. string.sub('000000' .. t[2], -6)
local fence = granted
local last = tonumber(cap[2])
if last and last >= tonumber(fence) then
  fence = string.format('%d', last + 1)
end
local ttl = tonumber(ARGV[2])
local pttl, untl, hb, ka = ttl, 0, 0, '0:0:0'
if ARGV[6] == '1' then
  untl, hb = now_ms + tonumber(ARGV[7]), tonumber(ARGV[8])
  pttl = math.max(math.min(ttl, untl - now_ms), 1)
  ka = sem_str(untl) .. ':' .. ARGV[8] .. ':' .. sem_str(now_ms)
  redis.call('ZADD', KEYS[5], math.min(now_ms + math.max(math.floor(ttl / 3), 1), untl), ARGV[9])
end
if reasons then
  lost_forget(KEYS[6], tok) -- an earlier lease's
end
if pttl < ttl then
  -- the max-hold deadline ends this lease; say so if it is not renewed by hand
  lost_record(KEYS[6], tok, 'max_hold', untl, fence, ARGV[11], ARGV[10])
end
-- the capacity record and the leases are kept for the lease's span (and
-- the record for the retention after it), never less than before
local expiry = now_ms + pttl
local span_end = math.max(expiry, untl)
local cx, cap_later = sem_until(c_at, span_end + ret)
local lx, leases_later = sem_until(x_at, span_end, now_ms)
-- The record's fence, and its capacity and mode when they change. Numbers
-- reach redis.call as strings: ARGV's where one is at hand, else sem_str's.
if fair and cap[3] ~= '1' then
  redis.call('HSET', KEYS[1], 'p', ARGV[12], 'f', fence, 'm', '1')
elseif stored then
  redis.call('HSET', KEYS[1], 'f', fence)
else
  redis.call('HSET', KEYS[1], 'p', ARGV[12], 'f', fence)
end
-- what the versions before wrote: '#c' says what x said, a plain record has no m
if not fair and cap[3] then
  redis.call('HDEL', KEYS[1], 'm', 'x')
elseif cap[4] then
  redis.call('HDEL', KEYS[1], 'x')
end
local expiry_s = sem_str(expiry)
local f = {tok, ARGV[13] .. ':' .. expiry_s .. ':' .. fence .. ':' .. ARGV[2] .. ':' .. ka .. ':' .. ARGV[11],
  '#u', u == 0 and ARGV[13] or sem_str(u + count)}
if not e or expiry < e then
  f[#f + 1] = '#e'
  f[#f + 1] = expiry_s
end
if leases_later then
  f[#f + 1] = '#x'
  f[#f + 1] = sem_str(lx)
end
if cap_later or not c_in then
  f[#f + 1] = '#c'
  f[#f + 1] = sem_str(cx)
end
if p_at ~= ARGV[12] then
  f[#f + 1] = '#p'
  f[#f + 1] = ARGV[12]
end
redis.call('HSET', KEYS[2], unpack(f))
if cap_later then
  redis.call('PEXPIRE', KEYS[1], sem_str(cx - now_ms))
end
if leases_later then
  redis.call('PEXPIRE', KEYS[2], sem_str(lx - now_ms))
end
available = available - count
-- every grant says so; when permits remain, the next waiters may take them
redis.call('PUBLISH', KEYS[7], 'acquired:' .. fence .. ':' .. (pttl == ttl and ARGV[2] or sem_str(pttl)) .. ':' .. sem_str(math.max(available, 0)))
return {1, tonumber(fence), pttl, now_ms, 0, fair and 1 or 0, untl, hb, n, available}
