-- keepalive_claim: hand a renewer the keep-alive registry shards that are
-- due (Redis Cluster only). The registry is split by hash slot, one shard
-- key "<prefix>keepalive:{<tag>}" per slot that has entries; this
-- directory says when each shard is next due, so renewers visit only due
-- shards. Claimed slots are set due again after the claim time, so other
-- instances skip them meanwhile, and take them over if this renewer stops
-- before it settles them (keepalive_settle.lua). A renewer that takes
-- longer than the claim time is harmless: two renewers may then visit one
-- shard, and renew_batch claims each entry atomically, so no lease is
-- renewed twice for one due time.
--
-- KEYS[1]  directory (zset: slot -> when its shard is next due, ms)
-- KEYS[2]  generations (hash: slot -> its last mark's generation, see
--          keepalive_mark.lua)
-- ARGV[1]  most slots to claim
-- ARGV[2]  claim time, ms
--
-- Reply: {now_ms, next_due_ms, slot1, generation1, slot2, generation2, ...}
--   the claimed slots, earliest due first, each with its generation as
--   claimed ("0" when it has none); next_due_ms is when the first slot not
--   claimed falls due, -1 when none is listed.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[1]))
local out = {now_ms, -1}
for _, slot in ipairs(due) do
  redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), slot)
  out[#out + 1] = tonumber(slot)
  out[#out + 1] = redis.call('HGET', KEYS[2], slot) or '0'
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #nxt > 0 then
  out[2] = tonumber(nxt[2])
end
return out
