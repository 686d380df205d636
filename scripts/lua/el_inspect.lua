-- el_inspect: read the state of an election (read-only).
--
-- KEYS[1]  leadership hash (fields: see el_acquire.lua)
-- KEYS[2]  term counter
-- KEYS[3]  waiters zset (score = candidate deadline in ms)
-- KEYS[4]  queue list
-- KEYS[5]  lost-lease reasons of this election (hash: token -> reason)
-- KEYS[6]  keep-alive registry (zset: "el/<token>:<name>" -> next renewal due, ms)
-- ARGV[1]  token to compare with the leader's, or "" for none
-- ARGV[2]  the token's keep-alive registry member ("el/<token>:<name>"), or ""
--
-- Reply: {led, term, ttl_ms, owned, now_ms, candidates, ka_until_ms,
--         ka_heartbeat_ms, ka_heartbeat_at_ms, lost_reason, owner,
--         since_us, value}
--   led/owned are 1 or 0; term is the leader's when led, else the last
--   term issued (0 when none is known); candidates counts the waiting
--   candidates whose deadline has not passed. lost_reason is why the given
--   token lost its leadership, as inspect.lua answers it for a lock. owner,
--   value and since_us (the Redis TIME of the grant, in µs) are the
--   leader's, "" and 0 when vacant.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local candidates = redis.call('ZCOUNT', KEYS[3], '(' .. now_ms, '+inf')
local lost = ''
if ARGV[1] ~= '' then
  lost = redis.call('HGET', KEYS[5], ARGV[1]) or ''
end
local v = redis.call('HMGET', KEYS[1], 't', 'f', 'ku', 'kh', 'kb', 'o', 'g', 'v')
if lost == '' and ARGV[2] ~= '' and v[1] ~= ARGV[1] and redis.call('ZSCORE', KEYS[6], ARGV[2]) then
  lost = 'expired'
end
if not v[1] then
  local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  return {0, last, 0, 0, now_ms, candidates, 0, 0, 0, lost, '', 0, ''}
end
local owned = 0
if ARGV[1] ~= '' and v[1] == ARGV[1] then
  owned = 1
  lost = ''
end
return {1, tonumber(v[2]), redis.call('PTTL', KEYS[1]), owned, now_ms, candidates,
  tonumber(v[3]) or 0, tonumber(v[4]) or 0, tonumber(v[5]) or 0, lost, v[6] or '',
  tonumber(v[7] or v[2]) or 0, v[8] or ''}
