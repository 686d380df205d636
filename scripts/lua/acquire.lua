-- acquire: take a lock lease, or re-enter it with the owning token. A caller
-- that is willing to wait is registered as a waiter when it does not get the
-- lock; in fair mode it also joins the FIFO queue, and only the queue's head
-- may take a free lock.
--
-- KEYS[1]  lock hash; its TTL is the lease TTL. Short field names keep a held
--          lock small: t token, n hold count, f fence, l lease TTL (ms),
--          m "1" when fair (absent otherwise), and for a keep-alive lease
--          ku max-hold deadline (ms), kh heartbeat interval (ms), kb last heartbeat (ms);
--          o the owner text when one was given (absent otherwise), and g the
--          grant's Redis TIME in µs only when it differs from the fence (the
--          fence is that time as a rule, see below: a grant costs no g field)
-- KEYS[2]  fence counter (string); every grant, re-entries included, keeps
--          it for the lease's span (its TTL, or for a keep-alive lease its
--          max hold) and the fence retention (ARGV[3]) after it, so it
--          outlives the lease by the retention
-- KEYS[3]  waiters zset: member = waiter token, score = its deadline (ms, Redis clock)
-- KEYS[4]  fair queue list: tokens of fair waiters in arrival order
-- KEYS[5]  keep-alive registry (zset: member -> next renewal due, ms)
-- KEYS[6]  lost-lease reasons of this lock (hash: token -> reason); a new
--          grant drops its token's reason, which was an earlier lease's
-- KEYS[7]  pub/sub channel of the lock's wake-ups: every grant, new or a
--          re-entry, publishes "acquired:<fence>:<ttl_ms>" on it, the
--          lease's fence and its TTL from the grant, so a waiter told to
--          re-check later learns when this lease ends (an expiry publishes
--          nothing) and every watcher sees the acquisition
-- ARGV[1]  token (base64url)
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  fence retention in milliseconds: how long the counter outlives
--          the last lease it fenced
-- ARGV[4]  mode: "1" fair, "0" plain
-- ARGV[5]  waiter timeout in milliseconds: when > 0 and the lock is not
--          granted, the caller stays registered as a waiter until now + this
--          (0: try once, register nothing)
-- ARGV[6]  "1" to keep the lease alive (renewed by the service), else "0"
-- ARGV[7]  keep-alive max hold in milliseconds (the lease ends at grant + max hold)
-- ARGV[8]  keep-alive heartbeat interval in milliseconds, 0 for none
-- ARGV[9]  keep-alive registry member ("<token>:<name>")
-- ARGV[10] how long lost-lease reasons are kept, in milliseconds
-- ARGV[11] "1" when the request gave no TTL: a re-entry then keeps the
--          lease's own TTL instead of taking ARGV[2] (the server default)
-- ARGV[12] owner text of a new grant, "" for none; a re-entry keeps the
--          lease's owner (the first grant's), whatever it sends
--
-- Reply: {status, hold_count, fence, ttl_ms, now_ms, recheck_ms, fair,
--         ka_until_ms, ka_heartbeat_ms}
--   status 1 = new grant, 2 = reentrant grant,
--          0 = not granted: held by another token, or (fair mode) free while
--              another waiter is first in the queue,
--         -3 = mode mismatch: the lock is fair and the caller is not, or the
--              other way round (see fair below)
--   When not granted, ttl_ms is the holder's remaining TTL (0 when free),
--   fence the holder's fence, and recheck_ms the latest time to try again
--   without a wake-up (the holder's TTL, or the queue head's deadline).
--   fair is 1 when the lock is fair: held by a fair lease or with fair
--   waiters queued. ka_until_ms is 0 when the lease is not kept alive.
-- The fence of a new grant is max(counter + 1, Redis TIME in microseconds),
-- and becomes the counter. Each grant takes well over a microsecond, so the
-- fence is in practice the grant's time, and it stays above every fence
-- issued before even when the counter was lost (a restart, FLUSHALL) or went
-- back (an AOF that lost its last second, a failover to a lagging replica),
-- as long as the clock did not go back further than the time since the lost
-- grants; when the clock steps back, counter + 1 keeps fences increasing.
-- A counter that expired outlived the last lease it fenced by the retention,
-- by Redis's own clock, so fences only fall back after it if that clock
-- steps back by more than the retention (or than the time since that
-- lease's grant, whichever is longer).
--#include lib/lost.lua
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
-- The TTL as the caller's string. Numbers reach redis.call as strings where a
-- string is at hand: a Lua number is formatted with printf's %.17g on every
-- call, which costs more than a simple command.
local ttl_s = ARGV[2]
local function ms(n)
  if n == ttl then return ttl_s end
  return n
end
local fair = ARGV[4] == '1'

-- One EXISTS covers the keys a lock nobody waits for and nobody lost (the
-- common case) does not have: the waiters zset and the fair queue count 1
-- each, the lost-lease reasons, named three times, count 3.
--#include lib/lease_wait.lua

if redis.call('EXISTS', KEYS[1]) == 1 then
  local v = redis.call('HMGET', KEYS[1], 't', 'n', 'f', 'm')
  if v[1] == ARGV[1] then
    local count = redis.call('HINCRBY', KEYS[1], 'n', '1')
    if ARGV[11] == '1' then
      local l = redis.call('HGET', KEYS[1], 'l')
      if l and string.find(l, '^%d+$') then
        ttl, ttl_s = tonumber(l), l
      end
    end
    redis.call('HSET', KEYS[1], 'l', ttl_s)
    local pttl, untl, hb = keepalive(false)
    -- a re-entry is a grant: the counter outlives the lease it extends
    redis.call('PEXPIRE', KEYS[2], math.max(pttl, untl - now_ms) + tonumber(ARGV[3]))
    redis.call('PEXPIRE', KEYS[1], ms(pttl))
    redis.call('PUBLISH', KEYS[7], 'acquired:' .. v[3] .. ':' .. ms(pttl))
    return {2, count, tonumber(v[3]), pttl, now_ms, 0, v[4] == '1' and 1 or 0, untl, hb}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  local held_fair = v[4] == '1'
  if held_fair ~= fair then
    return {-3, tonumber(v[2]) or 0, tonumber(v[3]) or 0, pttl, now_ms, pttl, held_fair and 1 or 0, 0, 0}
  end
  register()
  return {0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, pttl, now_ms, pttl, held_fair and 1 or 0, 0, 0}
end

-- The lock is free.
if head and head ~= ARGV[1] then
  local wait = tonumber(redis.call('ZSCORE', KEYS[3], head)) - now_ms
  if not fair then
    return {-3, 0, 0, 0, now_ms, wait, 1, 0, 0}
  end
  register()
  return {0, 0, 0, 0, now_ms, wait, 1, 0, 0}
end
if head then
  redis.call('LPOP', KEYS[4])
end
if waiting then
  redis.call('ZREM', KEYS[3], ARGV[1])
end

-- The fence: max(counter + 1, TIME in µs), see above. GET and SET with PX
-- refresh the counter's TTL in as many calls as INCR and PEXPIRE did: the
-- lease's span (a keep-alive lease's max hold, which is at least its TTL)
-- and the retention. The clock's digits are the fence as a string, as a
-- rule; a number is only formatted when counter + 1 wins.
local granted = t[1] .. string.sub('000000' .. t[2], -6)
local fence = granted
local last = tonumber(redis.call('GET', KEYS[2]))
if last and last >= tonumber(fence) then
  fence = string.format('%d', last + 1)
end
local span = ARGV[6] == '1' and tonumber(ARGV[7]) or ttl
redis.call('SET', KEYS[2], fence, 'PX', span + tonumber(ARGV[3]))
if reasons then
  -- a loss reason belongs to an earlier lease of this token, and so does a
  -- registry entry no renewer has visited yet (inspect would take it for a
  -- keep-alive lease that ran out unseen)
  lost_forget(KEYS[6], ARGV[1])
  if ARGV[6] ~= '1' then
    redis.call('ZREM', KEYS[5], ARGV[9])
  end
end
-- m, o and g are absent when they say nothing: a plain lock without an
-- owner granted at the fence's time holds four fields
local fields = {'t', ARGV[1], 'n', '1', 'f', fence, 'l', ttl_s}
if fair then
  fields[#fields + 1], fields[#fields + 2] = 'm', '1'
end
if ARGV[12] ~= '' then
  fields[#fields + 1], fields[#fields + 2] = 'o', ARGV[12]
end
if fence ~= granted then
  fields[#fields + 1], fields[#fields + 2] = 'g', granted
end
redis.call('HSET', KEYS[1], unpack(fields))
local pttl, untl, hb = ttl, 0, 0
if ARGV[6] == '1' then
  pttl, untl, hb = keepalive(true)
end
redis.call('PEXPIRE', KEYS[1], ms(pttl))
redis.call('PUBLISH', KEYS[7], 'acquired:' .. fence .. ':' .. ms(pttl))
return {1, 1, tonumber(fence), pttl, now_ms, 0, fair and 1 or 0, untl, hb}
