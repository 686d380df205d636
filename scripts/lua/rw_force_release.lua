-- rw_force_release: admin release of a read/write lock, whoever holds it:
-- the writer and every reader lose their leases. Bumps the fence counter so
-- every evicted fence is stale, records why each holder lost its lease, and
-- wakes waiters with "forced".
--
-- KEYS[1]  state hash (its fields: see lib/rw.lua)
-- KEYS[2]  pub/sub channel that waiters of this lock listen on
-- KEYS[3]  keep-alive registry (zset); the evicted leases are removed from it
-- KEYS[4]  lost-lease reasons of this lock (hash: token -> reason)
-- ARGV[1]  fence retention in milliseconds
-- ARGV[2]  how long lost-lease reasons are kept, in milliseconds
-- ARGV[3]  lock name (registry members are "rw/<token>:<name>")
--
-- Reply: the number of holders (tokens) evicted, 0 when the lock was free.
--#include lib/rw_fields.lua
--#include lib/rw.lua
--#include lib/lost.lua
local S, C, R, L = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local st = rw_load(S)
rw_prune(st)
if not rw_held(st) then
  rw_flush(st)
  return 0
end
-- every holder: the writer's fence and owner, or the reader's
local holders, seen = {}, {}
if st.w then
  holders[1] = {tok = st.w, f = st.wf, o = st.wo}
  seen[st.w] = 1
end
local all = redis.call('HGETALL', S)
for i = 1, #all, 2 do
  local f = all[i]
  if rw_is_reader(f) and not st.del[f] then
    local r = rw_reader(all[i + 1])
    if seen[f] then
      holders[seen[f]].f, holders[seen[f]].o = r.f, r.o -- a downgrading writer is told as its read lease
    else
      holders[#holders + 1] = {tok = f, f = r.f, o = r.o}
    end
    rw_drop(st, f)
  end
end
local last = math.max(tonumber(st.lf) or 0, tonumber(st.wf) or 0)
local bump = rw_now_us()
if last >= tonumber(bump) then
  bump = string.format('%d', last + 1)
end
rw_put(st, 'lf', bump)
for _, h in ipairs(holders) do
  redis.call('ZREM', R, 'rw/' .. h.tok .. ':' .. ARGV[3])
  lost_record(L, h.tok, 'force_released', now_ms, h.f, h.o, ARGV[2])
end
rw_drop_writer(st)
st.rc, st.rlo = 0, nil
rw_drop(st, 'rc')
rw_drop(st, 'rlo')
rw_free(st, tonumber(ARGV[1])) -- no lease is left: kept for the retention
rw_flush(st)
redis.call('PUBLISH', C, 'forced')
return #holders
