-- sem_inspect: read the state of a semaphore (read-only). Leases past their
-- expiry count as gone, though only a writing script removes them.
--
-- KEYS[1]  capacity hash (fields: see sem_acquire.lua)
-- KEYS[2]  leases hash (see lib/sem.lua)
-- KEYS[3]  waiters zset (score = waiter deadline in ms)
-- KEYS[4]  lost-lease reasons of this semaphore (hash: token -> reason)
-- KEYS[5]  keep-alive registry (zset: member -> next renewal due, ms)
-- ARGV[1]  token to report on, or "" for none
-- ARGV[2]  the token's keep-alive registry member, or ""
-- ARGV[3]  the most leases to describe in leases (0 for none)
--
-- Reply: {permits, in_use, holders, waiters, fair, fence, now_ms, owned,
--         count, lease_fence, ttl_ms, ka_until_ms, ka_heartbeat_ms,
--         ka_heartbeat_at_ms, lost_reason, owner, leases, leases_truncated}
--   permits is the stored capacity (0 when no record is kept); fence the
--   last fence issued (0 when none is known); fair is 1 when the semaphore
--   is fair and held or waited for. owned is 1 when the token holds a
--   lease; count .. owner describe that lease (0 and "" otherwise).
--   lost_reason says why the token lost its lease ("" when it holds one or
--   nothing is known); a keep-alive lease gone with no reason recorded
--   while still in the registry ran out before a renewal reached it:
--   "expired".
--   leases are the leases that have not expired, soonest to expire first,
--   at most ARGV[3] of them, each {owner, fence, ttl_ms, count}: a lease's
--   fence is the Redis TIME of its grant in µs (see sem_acquire.lua), never
--   its token. leases_truncated is 1 when more leases are held than listed.
--   Leases expiring at the same time are listed in their tokens' order.
--#include lib/sem.lua
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap = redis.call('HMGET', KEYS[1], 'p', 'f', 'm')
local all = redis.call('HGETALL', KEYS[2])
-- a legacy hash (see lib/sem.lua) is read as a writing script upgrades it
local legacy_end, scan
if #all > 0 then
  legacy_end = true
  for i = 1, #all, 2 do
    if all[i] == '#u' then
      legacy_end = nil
    end
  end
  if legacy_end then
    scan = sem_scan()
    legacy_end = scan.legacy_end(KEYS[2], now_ms)
  end
end
local live, in_use, mine = {}, 0, nil
for i = 1, #all, 2 do
  local tok, v = all[i], all[i + 1]
  if legacy_end then
    v = scan.from_legacy(v, legacy_end)
  end
  local count, expiry, fence, _, untl, hb, kb, owner = sem_lease(v)
  if string.sub(tok, 1, 1) ~= '#' and count and tonumber(expiry) > now_ms then
    local l = {tok = tok, expiry = tonumber(expiry), count = tonumber(count), fence = tonumber(fence),
      untl = tonumber(untl), hb = tonumber(hb), kb = tonumber(kb), owner = owner}
    live[#live + 1] = l
    in_use = in_use + l.count
    if tok == ARGV[1] then
      mine = l
    end
  end
end
local leases, most = {}, tonumber(ARGV[3]) or 0
if most > 0 and #live > 0 then
  table.sort(live, function(a, b)
    if a.expiry ~= b.expiry then
      return a.expiry < b.expiry
    end
    return a.tok < b.tok
  end)
  for i = 1, math.min(most, #live) do
    local l = live[i]
    leases[i] = {l.owner, l.fence, l.expiry - now_ms, l.count}
  end
end
local truncated = most > 0 and #live > most and 1 or 0
local waiters = redis.call('ZCOUNT', KEYS[3], '(' .. now_ms, '+inf')
local fair = (cap[3] == '1' and (#live > 0 or waiters > 0)) and 1 or 0
local out = {tonumber(cap[1]) or 0, in_use, #live, waiters, fair, tonumber(cap[2]) or 0, now_ms,
  0, 0, 0, 0, 0, 0, 0, '', '', leases, truncated}
if ARGV[1] == '' then
  return out
end
if mine then
  out[8], out[9], out[10], out[11] = 1, mine.count, mine.fence, mine.expiry - now_ms
  out[12], out[13], out[14], out[16] = mine.untl, mine.hb, mine.kb, mine.owner
  return out
end
local lost = redis.call('HGET', KEYS[4], ARGV[1]) or ''
if lost == '' and ARGV[2] ~= '' and redis.call('ZSCORE', KEYS[5], ARGV[2]) then
  lost = 'expired'
end
out[15] = lost
return out
