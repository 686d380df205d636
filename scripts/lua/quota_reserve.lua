-- quota_reserve: a tenant takes (or keeps) one place of a quota: a lease it
-- holds or a waiter it has. Places whose expiry has passed are dropped
-- first, so a place its holder never gave back frees itself. A member that
-- already has a place keeps it with the new expiry (a renewal or a
-- reentrant acquire), whatever the count.
--
-- KEYS[1]  the tenant's quota zset (member -> expiry, ms on Redis's clock)
-- ARGV[1]  member (the lease or waiter it counts)
-- ARGV[2]  how long the place lasts unless renewed, ms
-- ARGV[3]  quota: most members at once
--
-- Reply: {1, created} when the member has its place (created 1 when it had
-- none before), {0, retry_after_ms} when the quota is full: retry_after_ms
-- is until the first place expires.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local exp = now + tonumber(ARGV[2])
local created = 0
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  created = 1
  local n = redis.call('ZCARD', KEYS[1])
  if n >= tonumber(ARGV[3]) then
    local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {0, math.max(tonumber(first[2]) - now, 1)}
  end
end
redis.call('ZADD', KEYS[1], exp, ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], tonumber(last[2]))
return {1, created}
