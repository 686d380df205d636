-- inspect: read the state of a lock (read-only).
--
-- KEYS[1]  lock hash {token, count, fence}
-- KEYS[2]  fence counter
-- ARGV[1]  token to compare with the owner's, or "" for none
--
-- Reply: {held, hold_count, ttl_ms, fence, owned, now_ms}
--   held/owned are 1 or 0; fence is the current holder's fence when held,
--   else the last fence issued (0 when none is known).
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('HMGET', KEYS[1], 'token', 'count', 'fence')
if not v[1] then
  local last = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  return {0, 0, 0, last, 0, now_ms}
end
local owned = 0
if ARGV[1] ~= '' and v[1] == ARGV[1] then
  owned = 1
end
return {1, tonumber(v[2]), redis.call('PTTL', KEYS[1]), tonumber(v[3]), owned, now_ms}
