-- quota_set: a lease that has a place in its tenant's quota was granted or
-- renewed: its place now ends when the lease does at the latest. A member
-- without a place gets none (it never took one, or gave it back).
--
-- KEYS[1]  the tenant's quota zset (member -> end, ms on Redis's clock)
-- ARGV[1]  member
-- ARGV[2]  how long the place lasts from now, ms
--
-- Reply: 1 when the member has a place, 0 when it has none.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], tonumber(last[2]))
return 1
