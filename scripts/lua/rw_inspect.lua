-- rw_inspect: read the state of a read/write lock (read-only). Expired
-- leases are not counted, though only a state change removes them.
--
-- KEYS[1]  state hash (its fields: see lib/rw.lua)
-- KEYS[2]  waiters zset (token -> deadline, ms)
-- KEYS[3]  queue list ("r<token>" / "w<token>")
-- KEYS[4]  lost-lease reasons of this lock (hash: token -> reason)
-- KEYS[5]  keep-alive registry (zset)
-- ARGV[1]  token to look up, or "" for none
-- ARGV[2]  the token's keep-alive registry member, or ""
-- ARGV[3]  the most leases to describe in leases (0 for none)
--
-- Reply: {write_held, readers, fence, now_ms, waiting_readers,
--         waiting_writers, fair, mode, hold_count, ttl_ms, ka_until_ms,
--         ka_heartbeat_ms, ka_heartbeat_at_ms, lost_reason, owner, leases,
--         leases_truncated}
--   fence is the writer's fence when write-held, else the last fence issued
--   (0 when none is known). mode is what the token holds: 0 nothing, 1 the
--   read lease, 2 the write lease, 3 both; hold_count, ttl_ms, the ka_*
--   fields and owner are those of its write lease when it holds one, else
--   of its read lease. lost_reason is why the token lost its lease ("" when
--   it holds one or nothing is known); a keep-alive lease that is gone
--   while its registry entry stays ran out before a renewal reached it.
--   leases are the leases that have not expired, the writer's first, then
--   the readers' soonest to expire first, at most ARGV[3] of them, each
--   {owner, fence, ttl_ms, mode} with mode 1 read, 2 write: a lease's fence
--   is the Redis TIME of its grant in µs (see rw_acquire.lua), never its
--   token. leases_truncated is 1 when more leases are held than listed.
--#include lib/rw_fields.lua
--#include lib/rw.lua
local S, W, Q, L, R = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local tok = ARGV[1]
local all = redis.call('HGETALL', S)
local v, readers = {}, {}
for i = 1, #all, 2 do
  local f = all[i]
  if rw_is_reader(f) then
    local r = rw_reader(all[i + 1])
    if r.x > now_ms then
      r.tok = f
      readers[#readers + 1] = r
    end
  else
    v[f] = all[i + 1]
  end
end
local wx = tonumber(v.wx) or 0
local write_held = v.w and wx > now_ms
local fence = write_held and tonumber(v.wf) or tonumber(v.lf) or 0
local wr, ww = 0, 0
if (tonumber(v.qn) or 0) > 0 then
  local live = {}
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', W, '(' .. now_ms, '+inf')) do live[m] = true end
  for _, e in ipairs(redis.call('LRANGE', Q, 0, -1)) do
    if live[string.sub(e, 2)] then
      if string.sub(e, 1, 1) == 'w' then ww = ww + 1 else wr = wr + 1 end
    end
  end
end
local busy = write_held or #readers > 0 or wr + ww > 0
local fair = (busy and v.m == '1') and 1 or 0
local mode, n, ttl, ku, kh, kb, owner, lost = 0, 0, 0, 0, 0, 0, '', ''
if tok ~= '' then
  for _, r in ipairs(readers) do
    if r.tok == tok then
      mode, n, ttl, ku, kh, kb, owner = 1, r.n, r.x - now_ms, r.ku, r.kh, r.kb, r.o
    end
  end
  if write_held and v.w == tok then
    mode = mode + 2
    n, ttl, owner = tonumber(v.wn), wx - now_ms, v.wo or ''
    ku, kh, kb = tonumber(v.wku) or 0, tonumber(v.wkh) or 0, tonumber(v.wkb) or 0
  end
  if mode == 0 then
    lost = redis.call('HGET', L, tok) or ''
    if lost == '' and ARGV[2] ~= '' and redis.call('ZSCORE', R, ARGV[2]) then
      lost = 'expired'
    end
  end
end
local leases, most = {}, tonumber(ARGV[3]) or 0
if write_held and most > 0 then
  leases[1] = {v.wo or '', tonumber(v.wf) or 0, wx - now_ms, 2}
end
if most > #leases and #readers > 0 then
  table.sort(readers, function(a, b)
    if a.x ~= b.x then return a.x < b.x end
    return a.tok < b.tok
  end)
  for i = 1, math.min(#readers, most - #leases) do
    local r = readers[i]
    leases[#leases + 1] = {r.o, tonumber(r.f), r.x - now_ms, 1}
  end
end
local truncated = most > 0 and (write_held and 1 or 0) + #readers > most and 1 or 0
return {write_held and 1 or 0, #readers, fence, now_ms, wr, ww, fair, mode, n, ttl, ku, kh, kb, lost, owner,
  leases, truncated}
