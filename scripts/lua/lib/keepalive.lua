-- lib/keepalive.lua: the frame of the keep-alive batch renewal scripts
-- (renew_batch.lua, rw_renew_batch.lua, sem_renew_batch.lua), which take
-- the registry as KEYS[1], the lost reasons' retention in ms as ARGV[1] and
-- entry i's registry member as ARGV[1+i], and define now_ms (whole ms of
-- the Redis clock) before including this fragment.
--
-- lose records why tok lost its lease in the lost hash, for ARGV[1] ms:
-- the lease ended or ends at at_ms, with its fence and owner when known
-- (see lib/lost.lua, which a script includes before this fragment).
local function lose(lost, tok, reason, at_ms, fence, owner)
  lost_record(lost, tok, reason, at_ms, fence, owner, ARGV[1])
end

-- next_renewal is how a renewal of a lease of ttl ms that must end by untl
-- (ms) goes: the TTL to set, when the next renewal is due (a third of the
-- TTL on, at least 1 ms), and the reason "max_hold" (recorded as lost,
-- with the lease's fence and owner) when this renewal runs to the
-- deadline, "" otherwise.
local function next_renewal(lost, tok, ttl, untl, fence, owner)
  if untl - now_ms <= ttl then
    lose(lost, tok, 'max_hold', untl, fence, owner)
    return untl - now_ms, untl, 'max_hold'
  end
  return ttl, now_ms + math.max(math.floor(ttl / 3), 1), ''
end

-- renew_entries calls renew(i, m) for every entry i whose member m is due
-- in the registry, which returns the entry's code and reason, and replies
-- {now_ms, code1, lag1_ms, reason1, ..., next_due_ms}: lag is how late the
-- entry was visited (ms since it fell due), an entry no longer due or
-- registered is skipped (code 0), and next_due_ms is when the registry's
-- first entry is due once these are renewed (-1 when it is empty).
local function renew_entries(renew)
  local out = {now_ms}
  for i = 1, #ARGV - 1 do
    local m = ARGV[1 + i]
    local due = tonumber(redis.call('ZSCORE', KEYS[1], m))
    local code, lag, reason = 0, 0, ''
    if due and due <= now_ms then
      lag = now_ms - due
      code, reason = renew(i, m)
    end
    out[#out + 1] = code
    out[#out + 1] = lag
    out[#out + 1] = reason
  end
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  out[#out + 1] = first[2] and tonumber(first[2]) or -1
  return out
end
