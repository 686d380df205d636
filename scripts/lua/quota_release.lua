-- quota_release: a tenant gives back one place of a quota (its lease was
-- released or lost, or its waiter stopped waiting).
--
-- KEYS[1]  the tenant's quota zset (member -> expiry, ms on Redis's clock)
-- ARGV[1]  member
--
-- Reply: 1 when the member had a place, 0 when it had none.
return redis.call('ZREM', KEYS[1], ARGV[1])
