-- inspect: read the state of a lock (read-only).
--
-- KEYS[1]  lock hash (fields: see acquire.lua)
-- KEYS[2]  fence counter
-- KEYS[3]  waiters zset (score = waiter deadline in ms)
-- KEYS[4]  fair queue list
-- KEYS[5]  lost-lease reasons of this lock (hash: token -> reason)
-- KEYS[6]  keep-alive registry (zset: "<token>:<name>" -> next renewal due, ms)
-- ARGV[1]  token to compare with the owner's, or "" for none
-- ARGV[2]  the token's keep-alive registry member ("<token>:<name>"), or ""
--
-- Reply: {held, hold_count, ttl_ms, fence, owned, now_ms, waiters, fair,
--         ka_until_ms, ka_heartbeat_ms, ka_heartbeat_at_ms, lost_reason,
--         owner, granted_at_us}
--   held/owned are 1 or 0; fence is the current holder's fence when held,
--   else the last fence issued (0 when none is known); waiters counts the
--   waiters whose deadline has not passed; fair is 1 when the lock is held
--   by a fair lease or has fair waiters queued. ka_until_ms is 0 for a
--   lease that is not kept alive. lost_reason is why the given token lost
--   its lease ("" when it owns the lease or nothing is known). A keep-alive
--   lease that is gone with no reason recorded, while it is still in the
--   registry, ran out before a renewal reached it (every instance was down,
--   or Redis stalled): it expired, though no renewer has said so yet.
--   owner is the owner text the lease was granted with ("" for none or when
--   free); granted_at_us is the Redis TIME of the grant in µs (0 when
--   free): the g field when the grant wrote one, else the fence, which is
--   that time whenever g is absent (see acquire.lua).
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local waiters = redis.call('ZCOUNT', KEYS[3], '(' .. now_ms, '+inf')
local queued = redis.call('LLEN', KEYS[4]) > 0 and waiters > 0
local lost = ''
if ARGV[1] ~= '' then
  lost = redis.call('HGET', KEYS[5], ARGV[1]) or ''
end
local v = redis.call('HMGET', KEYS[1], 't', 'n', 'f', 'm', 'ku', 'kh', 'kb', 'o', 'g')
if lost == '' and ARGV[2] ~= '' and v[1] ~= ARGV[1] and redis.call('ZSCORE', KEYS[6], ARGV[2]) then
  lost = 'expired'
end
if not v[1] then
  local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  return {0, 0, 0, last, 0, now_ms, waiters, queued and 1 or 0, 0, 0, 0, lost, '', 0}
end
local owned = 0
if ARGV[1] ~= '' and v[1] == ARGV[1] then
  owned = 1
  lost = ''
end
local fair = (v[4] == '1' or queued) and 1 or 0
return {1, tonumber(v[2]), redis.call('PTTL', KEYS[1]), tonumber(v[3]), owned, now_ms, waiters, fair,
  tonumber(v[5]) or 0, tonumber(v[6]) or 0, tonumber(v[7]) or 0, lost, v[8] or '', tonumber(v[9] or v[3]) or 0}
