-- lib/lease_renew.lua: the body of renew.lua and el_renew.lua (see their
-- headers): a lease of one token renewed, its keep-alive's heartbeat taken,
-- a shortened TTL published. Needs lib/lost.lua and lib/heartbeat.lua.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('HMGET', KEYS[1], 't', 'n', 'f', 'l', 'ku', 'kh', 'o')
if not v[1] then
  return {-1, 0, 0, 0, now_ms, 0, 0}
end
if v[1] ~= ARGV[1] then
  return {-2, 0, 0, 0, now_ms, 0, 0}
end
local ttl = tonumber(ARGV[2])
local changed = false
if ttl <= 0 then
  ttl = tonumber(v[4])
elseif ttl ~= tonumber(v[4]) then
  changed = true
  redis.call('HSET', KEYS[1], 'l', ARGV[2])
end
local pttl = ttl
local untl = tonumber(v[5])
if untl then
  redis.call('HSET', KEYS[1], 'kb', now_ms)
  pttl = heartbeat(KEYS[2], ARGV[1], ARGV[3], untl, ttl, now_ms, v[3], v[7])
  if changed then
    -- the next renewal was due on the old TTL's schedule
    redis.call('ZADD', KEYS[3], math.min(now_ms + math.max(math.floor(ttl / 3), 1), untl), ARGV[4])
  end
end
if changed and pttl < redis.call('PTTL', KEYS[1]) then
  redis.call('PUBLISH', KEYS[4], 'shortened')
end
redis.call('PEXPIRE', KEYS[1], pttl)
redis.call('PEXPIRE', KEYS[5], math.max(pttl, (untl or 0) - now_ms) + tonumber(ARGV[5]))
-- an election's leadership has no hold count ('n' never set): its reply's is 1
return {1, tonumber(v[2]) or 1, tonumber(v[3]), pttl, now_ms, untl or 0, tonumber(v[6]) or 0}
