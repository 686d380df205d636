-- keepalive_due: list the keep-alive leases that are due for renewal first.
-- The renewer passes these members to renew_batch, which checks again,
-- atomically, that each one is still due. Entries that are neither
-- "<token>:<name>" (the exclusive lock's) nor "<kind>/<token>:<name>" (another
-- primitive's, kind a lowercase tag) are removed: Latchkey never writes them,
-- and they must not crowd out the real ones.
--
-- KEYS[1]  keep-alive registry (zset: member -> next renewal due, ms)
-- ARGV[1]  most entries to return
--
-- Reply: {now_ms, tracked, next_due_ms, member1, due1_ms, member2, due2_ms, ...}
--   members are the registry entries due now (due <= now_ms), earliest first;
--   tracked is the registry's size; next_due_ms is when the first entry not
--   returned falls due (-1 when there is none; now_ms after dropping
--   entries, as more may be due).
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local out = {now_ms, redis.call('ZCARD', KEYS[1]), -1}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'WITHSCORES', 'LIMIT', 0, limit)
local function wellformed(m)
  local kind, rest = string.match(m, '^([a-z]+)/(.+)$')
  if kind then
    m = rest
  end
  local tok, name = string.match(m, '^([A-Za-z0-9_-]+):(.+)$')
  return tok and #tok >= 22 and #tok <= 128 and #name <= 128
    and string.match(name, '^[A-Za-z0-9][A-Za-z0-9._:-]*$') ~= nil
end
local dropped = false
for i = 1, #due, 2 do
  if wellformed(due[i]) then
    out[#out + 1] = due[i]
    out[#out + 1] = tonumber(due[i + 1])
  else
    redis.call('ZREM', KEYS[1], due[i])
    dropped = true
  end
end
local nxt = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if dropped then
  out[3] = now_ms -- entries dropped: more may be due behind them, look again now
elseif #nxt > 0 then
  out[3] = tonumber(nxt[2])
end
return out
