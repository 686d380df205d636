-- lost_list: the leases a name lost that its lost-lease hash still records
-- (see lib/lost.lua), newest first, never a token: the records whose end
-- has come by the Redis clock (a lease that will end at its max-hold
-- deadline is still held). Changes nothing.
--
-- KEYS[1]  lost-lease hash of the name (token -> reason, '@' .. token -> record)
-- ARGV[1]  the most records to answer
--
-- Reply: {truncated, reason1, lost_at_ms1, fence1, owner1, reason2, ...}
--   truncated is 1 when more records had come than ARGV[1]; fence and owner
--   are "" when the record does not know them.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local reasons, recs = {}, {}
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if string.sub(f, 1, 1) == '@' then
    local at, fence, owner = string.match(v, '^(%d+):(%d*):(.*)$')
    if at and tonumber(at) <= now_ms then
      recs[#recs + 1] = {tok = string.sub(f, 2), at = tonumber(at), fence = fence, owner = owner}
    end
  else
    reasons[f] = v
  end
end
table.sort(recs, function(a, b) return a.at > b.at end)
local most = tonumber(ARGV[1])
local out = {#recs > most and 1 or 0}
for i = 1, math.min(#recs, most) do
  local r = recs[i]
  if reasons[r.tok] then
    out[#out + 1] = reasons[r.tok]
    out[#out + 1] = string.format('%.0f', r.at)
    out[#out + 1] = r.fence
    out[#out + 1] = r.owner
  end
end
return out
