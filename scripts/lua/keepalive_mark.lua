-- keepalive_mark: tell the directory of keep-alive registry shards (Redis
-- Cluster only; see keepalive_claim.lua) that a shard has an entry falling
-- due: after a keep-alive grant or a renewal that set a new TTL, and when a
-- reconciliation finds a shard the directory lacks.
--
-- Every mark gives the slot a new generation, so a renewer that visited the
-- shard before the entry was written, and settles after this mark, does not
-- push the slot's due time past the new entry (see keepalive_settle.lua).
-- A generation is the directory node's clock in microseconds (or one above
-- the slot's last generation, when that is later): keepalive_settle drops
-- the generation of a slot that leaves the directory, so that the
-- directory's keys are gone once every shard is empty, and a slot marked
-- again later must not get back a generation a renewer may still hold from
-- an older claim. The clock only goes forward, so it never does.
-- The entry is written to its shard before the mark is sent: a renewer that
-- claims the slot after the mark sees it. The grant is returned to its
-- client only after its mark ran, so a lease a client holds is always one
-- the directory lists. An instance that stops between the two leaves the
-- entry unmarked (of a grant nobody learnt of); it is found by the next
-- reconciliation, and until then the lease may run out unrenewed (it ends,
-- as a lease whose holder stopped does: never a double grant).
--
-- KEYS[1]  directory (zset: slot -> when its shard is next due, ms)
-- KEYS[2]  generations (hash: slot -> its last mark's generation)
-- ARGV[1]  mode: "lt" moves a slot's due time earlier only (adding the slot
--          when missing), "nx" adds a slot that is missing and leaves a
--          listed one as it is
-- ARGV[2i], ARGV[2i+1]  slot i, and ms from now until it is due
--
-- Reply: how many slots were added or moved earlier.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nx = ARGV[1] == 'nx'
local changed = 0
local function bump(slot)
  local last = tonumber(redis.call('HGET', KEYS[2], slot) or '0')
  redis.call('HSET', KEYS[2], slot, string.format('%.0f', math.max(now_us, last + 1)))
end
for i = 2, #ARGV - 1, 2 do
  local slot, due = ARGV[i], now_ms + tonumber(ARGV[i + 1])
  local cur = tonumber(redis.call('ZSCORE', KEYS[1], slot))
  if not cur or (not nx and due < cur) then
    redis.call('ZADD', KEYS[1], due, slot)
    bump(slot)
    changed = changed + 1
  elseif not nx then
    bump(slot)
  end
end
return changed
