-- quota_release: a tenant gives back places of a quota: one member's (its
-- lease was released or lost, its acquire was refused, or its waiter
-- stopped waiting), or every lease's place on one name of one primitive
-- (the name was force-released). The key keeps expiring with its last
-- place, so a place taken and given back leaves the set as it was.
--
-- KEYS[1]  the tenant's quota zset (member -> end, ms on Redis's clock)
-- ARGV[1]  member, or with ARGV[2] the primitive's label
-- ARGV[2]  optional: the name whose leases' places all go; a lease's member
--          is "<label>:<token>:<name>" and tokens hold no ':'
--
-- Reply: how many places were given back.
local n = 0
if ARGV[2] == nil then
  n = redis.call('ZREM', KEYS[1], ARGV[1])
else
  local head = ARGV[1] .. ':'
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if string.sub(m, 1, #head) == head then
      local sep = string.find(m, ':', #head + 1, true)
      if sep and string.sub(m, sep + 1) == ARGV[2] then
        n = n + redis.call('ZREM', KEYS[1], m)
      end
    end
  end
end
if n > 0 then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', KEYS[1], tonumber(last[2]))
  end
end
return n
