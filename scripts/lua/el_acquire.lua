-- el_acquire: campaign in an election, or re-enter the leadership with the
-- leading token. An election is a fair exclusive lease: candidates willing
-- to wait are registered as waiters and queued in arrival order, and only
-- the queue's head may take a vacant leadership. The leader's lease holds
-- its value; its fence is the term.
--
-- KEYS[1]  leadership hash; its TTL is the lease TTL. Fields as a lock's
--          (see acquire.lua), fewer: t token, f term (the fence), l lease
--          TTL (ms), v the value (absent when ""), o the owner text (absent
--          when none), g the grant's Redis TIME in µs only when it differs
--          from the term, and for a keep-alive lease ku, kh, kb. There is no
--          hold count (a leader leads once) and no mode (always fair).
-- KEYS[2]  term counter (string), kept as acquire.lua keeps a fence counter
-- KEYS[3]  waiters zset: member = candidate token, score = its deadline (ms, Redis clock)
-- KEYS[4]  queue list: tokens of waiting candidates in arrival order
-- KEYS[5]  keep-alive registry (zset: member -> next renewal due, ms)
-- KEYS[6]  lost-lease reasons of this election (hash: token -> reason)
-- KEYS[7]  pub/sub channel of this election
-- ARGV[1]  token (base64url)
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  term retention in milliseconds: how long the counter outlives
--          the last lease it fenced
-- ARGV[4]  mode, ignored: an election is always fair
-- ARGV[5]  waiter timeout in milliseconds: when > 0 and the leadership is
--          not granted, the caller stays registered and queued until now +
--          this (0: try once, register nothing)
-- ARGV[6]  "1" to keep the lease alive (renewed by the service), else "0"
-- ARGV[7]  keep-alive max hold in milliseconds
-- ARGV[8]  keep-alive heartbeat interval in milliseconds, 0 for none
-- ARGV[9]  keep-alive registry member ("el/<token>:<name>")
-- ARGV[10] how long lost-lease reasons are kept, in milliseconds
-- ARGV[11] "1" when the request gave no TTL: a re-entry then keeps the
--          lease's own TTL instead of taking ARGV[2]
-- ARGV[12] owner text of a new grant, "" for none; a re-entry keeps the
--          first grant's
-- ARGV[13] the value to lead with; a re-entry proclaims it
--
-- Reply: {status, hold_count, term, ttl_ms, now_ms, recheck_ms, fair,
--         ka_until_ms, ka_heartbeat_ms, owner, granted_at_us, value}
--   status 1 = new grant (elected), 2 = re-entry by the leader,
--          0 = not granted: another token leads, or the leadership is
--              vacant while another candidate is first in the queue
--   hold_count is 1 when granted; fair is always 1. When not granted,
--   ttl_ms is the leader's remaining TTL (0 when vacant), term, owner,
--   granted_at_us and value are the leader's (0 and "" when vacant), and
--   recheck_ms the latest time to try again without a wake-up.
-- The term of a new grant is max(counter + 1, Redis TIME in µs), as
-- acquire.lua's fence is, and so stays above every earlier term also when
-- the counter was lost.
-- A new grant publishes "acquired:<term>:<ttl_ms>" on the channel; a
-- re-entry that changes the value publishes "proclaimed:<term>".
--#include lib/lost.lua
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local ttl_s = ARGV[2]

local fair = true -- an election serves its candidates in arrival order
--#include lib/lease_wait.lua

if redis.call('EXISTS', KEYS[1]) == 1 then
  local v = redis.call('HMGET', KEYS[1], 't', 'f', 'o', 'g', 'v', 'l')
  if v[1] == ARGV[1] then
    if ARGV[11] == '1' and v[6] and string.find(v[6], '^%d+$') then
      ttl, ttl_s = tonumber(v[6]), v[6]
    end
    redis.call('HSET', KEYS[1], 'l', ttl_s)
    if (v[5] or '') ~= ARGV[13] then
      if ARGV[13] == '' then
        redis.call('HDEL', KEYS[1], 'v')
      else
        redis.call('HSET', KEYS[1], 'v', ARGV[13])
      end
      redis.call('PUBLISH', KEYS[7], 'proclaimed:' .. v[2])
    end
    local pttl, untl, hb = keepalive(false)
    redis.call('PEXPIRE', KEYS[2], math.max(pttl, untl - now_ms) + tonumber(ARGV[3]))
    redis.call('PEXPIRE', KEYS[1], pttl)
    return {2, 1, tonumber(v[2]), pttl, now_ms, 0, 1, untl, hb, v[3] or '', tonumber(v[4] or v[2]), ARGV[13]}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  register()
  return {0, 1, tonumber(v[2]) or 0, pttl, now_ms, pttl, 1, 0, 0, v[3] or '', tonumber(v[4] or v[2]) or 0, v[5] or ''}
end

-- The leadership is vacant.
if head and head ~= ARGV[1] then
  local wait = tonumber(redis.call('ZSCORE', KEYS[3], head)) - now_ms
  register()
  return {0, 0, 0, 0, now_ms, wait, 1, 0, 0, '', 0, ''}
end
if head then
  redis.call('LPOP', KEYS[4])
end
if waiting then
  redis.call('ZREM', KEYS[3], ARGV[1])
end

local granted = t[1] .. string.sub('000000' .. t[2], -6)
local term = granted
local last = tonumber(redis.call('GET', KEYS[2]))
if last and last >= tonumber(term) then
  term = string.format('%d', last + 1)
end
local span = ARGV[6] == '1' and tonumber(ARGV[7]) or ttl
redis.call('SET', KEYS[2], term, 'PX', span + tonumber(ARGV[3]))
if reasons then
  lost_forget(KEYS[6], ARGV[1])
  if ARGV[6] ~= '1' then
    redis.call('ZREM', KEYS[5], ARGV[9])
  end
end
local fields = {'t', ARGV[1], 'f', term, 'l', ttl_s}
if ARGV[13] ~= '' then
  fields[#fields + 1], fields[#fields + 2] = 'v', ARGV[13]
end
if ARGV[12] ~= '' then
  fields[#fields + 1], fields[#fields + 2] = 'o', ARGV[12]
end
if term ~= granted then
  fields[#fields + 1], fields[#fields + 2] = 'g', granted
end
redis.call('HSET', KEYS[1], unpack(fields))
local pttl, untl, hb = ttl, 0, 0
if ARGV[6] == '1' then
  pttl, untl, hb = keepalive(true)
end
redis.call('PEXPIRE', KEYS[1], pttl)
redis.call('PUBLISH', KEYS[7], 'acquired:' .. term .. ':' .. pttl)
return {1, 1, tonumber(term), pttl, now_ms, 0, 1, untl, hb, ARGV[12], tonumber(granted), ARGV[13]}
