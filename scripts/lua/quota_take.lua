-- quota_take: a tenant takes one place of a quota for a lease it may be
-- granted or a waiter it has. Places whose end has passed are dropped
-- first, so a place its holder never gave back frees itself. A member that
-- already has a place keeps it as it is (a re-entry of a lease that has
-- one): only the lease's grant or renewal moves its end (quota_set).
--
-- KEYS[1]  the tenant's quota zset (member -> end, ms on Redis's clock);
--          the key itself expires with its last place
-- ARGV[1]  member (the lease or waiter it counts)
-- ARGV[2]  how long a new place lasts unless set again, ms
-- ARGV[3]  quota: most members at once
--
-- Reply: {1, created} when the member has its place (created 1 when it had
-- none before), {0, retry_after_ms} when the quota is full: retry_after_ms
-- is until the first place ends.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {1, 0}
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, math.max(tonumber(first[2]) - now, 1)}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], tonumber(last[2]))
return {1, 1}
