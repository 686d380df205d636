-- keepalive_settle: record, after a renewer visited the shards it claimed
-- (keepalive_claim.lua), when each is next due (Redis Cluster only).
--
-- A slot whose generation is unchanged since its claim had no mark since:
-- every entry of its shard was written before the renewer's last look, so
-- the shard's next due time is the one seen, or the slot leaves the
-- directory, with its generation, when its shard was empty (so that the
-- directory's keys are gone once every shard is: Redis deletes an empty
-- sorted set or hash). A changed generation means a grant
-- marked the slot meanwhile (keepalive_mark.lua), whose entry the renewer
-- may not have seen: the slot keeps the earlier of its listed due time and
-- the one seen, and is never removed.
--
-- Races: a mark before the claim is seen by the claim's generation and its
-- entry by the visit; a mark between the claim and this script bumps the
-- generation; a mark after this script lowers the due time itself, or adds
-- the slot back with a generation no claim has seen (a generation is the
-- clock when it was marked, keepalive_mark.lua), so a renewer still holding
-- an older claim of the slot sees it changed. The
-- directory's node may lose recent writes when it fails over: renewers
-- reconcile it with the shards on every primary after a failure and every
-- half minute (a SCAN), adding the shards it lacks as due at once.
--
-- KEYS[1]  directory (zset: slot -> when its shard is next due, ms)
-- KEYS[2]  generations (hash: slot -> its last mark's generation)
-- ARGV[3i-2], ARGV[3i-1], ARGV[3i]  slot i, its generation as claimed, and
--          when its shard is next due (ms; -1 when the shard is empty)
--
-- Reply: how many slots left the directory.
local removed = 0
for i = 1, #ARGV - 2, 3 do
  local slot, gen, nxt = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if (redis.call('HGET', KEYS[2], slot) or '0') == gen then
    if nxt < 0 then
      removed = removed + redis.call('ZREM', KEYS[1], slot)
      redis.call('HDEL', KEYS[2], slot)
    else
      redis.call('ZADD', KEYS[1], nxt, slot)
    end
  elseif nxt >= 0 then
    local cur = tonumber(redis.call('ZSCORE', KEYS[1], slot))
    if not cur or nxt < cur then
      redis.call('ZADD', KEYS[1], nxt, slot)
    end
  end
end
return removed
