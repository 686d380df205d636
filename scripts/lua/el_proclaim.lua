-- el_proclaim: the leader sets a new value without giving up leadership.
--
-- KEYS[1]  leadership hash (fields: see el_acquire.lua)
-- KEYS[2]  pub/sub channel of this election
-- ARGV[1]  token (base64url)
-- ARGV[2]  the new value ("" for none)
--
-- Reply: {status, term, ttl_ms, now_ms}
--   status 1 = proclaimed, -1 = no such lease (expired or released),
--   -2 = another token leads
-- A proclamation publishes "proclaimed:<term>" on the channel, also when
-- the value is the one already held (a watcher re-reads the state).
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('HMGET', KEYS[1], 't', 'f')
if not v[1] then
  return {-1, 0, 0, now_ms}
end
if v[1] ~= ARGV[1] then
  return {-2, 0, 0, now_ms}
end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], 'v')
else
  redis.call('HSET', KEYS[1], 'v', ARGV[2])
end
redis.call('PUBLISH', KEYS[2], 'proclaimed:' .. v[2])
return {1, tonumber(v[2]), redis.call('PTTL', KEYS[1]), now_ms}
