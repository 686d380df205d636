-- rw_acquire: take a read or write lease of a read/write lock, or re-enter
-- one with the owning token. Many readers or one writer; a writer may take
-- the read lease with its token (a downgrade); a reader asking for write is
-- refused (an upgrade). A caller willing to wait is registered as a waiter
-- and queued in arrival order (in both modes); readers never pass a writer
-- queued ahead of them (no writer starvation), and in fair mode a writer
-- never passes anyone queued ahead of it.
--
-- KEYS[1]  state hash (its fields: see lib/rw.lua)
--          Every grant, re-entries included, keeps it (and so the fence
--          counter in it) for at least the lease's span (its TTL, or for a
--          keep-alive lease its max hold) and the fence retention (ARGV[3])
--          after it
-- KEYS[2]  waiters zset: member = waiter token, score = its deadline (ms)
-- KEYS[3]  queue list: "r<token>" / "w<token>" of waiters in arrival order
-- KEYS[4]  keep-alive registry (zset: member -> next renewal due, ms)
-- KEYS[5]  lost-lease reasons of this lock (hash: token -> reason)
-- KEYS[6]  pub/sub channel of the lock's wake-ups: every grant, read or
--          write, new or a re-entry, publishes "acquired:<fence>:<ttl_ms>"
--          on it, the lease's fence and its TTL from the grant, so a waiter
--          told to re-check later (a queued writer ahead of it) learns when
--          this lease ends (an expiry publishes nothing) and every watcher
--          sees the acquisition
-- ARGV[1]  token (base64url)
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  fence retention in milliseconds: how long the counter outlives
--          the last lease it fenced
-- ARGV[4]  fairness: "1" fair, "0" plain
-- ARGV[5]  waiter timeout in milliseconds (0: try once, register nothing)
-- ARGV[6]  "1" to keep the lease alive (renewed by the service), else "0"
-- ARGV[7]  keep-alive max hold in milliseconds
-- ARGV[8]  keep-alive heartbeat interval in milliseconds, 0 for none
-- ARGV[9]  keep-alive registry member ("rw/<token>:<name>")
-- ARGV[10] how long lost-lease reasons are kept, in milliseconds
-- ARGV[11] "1" when the request gave no TTL: a re-entry keeps the lease's own
-- ARGV[12] owner text of a new grant, "" for none
-- ARGV[13] mode: "r" read, "w" write
-- ARGV[14] "1" when the service made the token for this acquire: no earlier
--          lease of it left a registry entry or a lost reason to clear
--
-- Reply: {status, hold_count, fence, ttl_ms, now_ms, recheck_ms, fair,
--         ka_until_ms, ka_heartbeat_ms}
--   status 1 = new grant, 2 = reentrant grant, 0 = not granted,
--         -3 = fairness mismatch (the lock is fair and the caller is not, or
--              the other way round), -4 = upgrade refused (the token holds
--              the read lease and asked for write)
--   When not granted, ttl_ms is the remaining TTL of what blocks the caller
--   (0 when only the queue does; for readers that block a writer, until the
--   soonest of them may end) and recheck_ms the latest time to try again
--   without a wake-up.
-- Every new grant, read or write, gets the fence max(last fence + 1, TIME
-- in µs), as acquire.lua's; an expired lease (by its expiry, the Redis
-- clock) is removed before anything is decided, so it never blocks anyone.
-- The common grant reads S once and writes it once: the queue is read only
-- while someone waits, and the readers one by one only when one may have
-- expired (lib/rw.lua). A new read lease of a lock nobody writes or waits
-- for is granted by straight-line code before lib/rw.lua's helpers are
-- defined, which changes exactly what the general code would.
--#include lib/rw_fields.lua
local S, W, Q, R, L, C = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local tok, mode, fair = ARGV[1], ARGV[13], ARGV[4] == '1'
local ttl = tonumber(ARGV[2])
local v = rw_fields(S, tok)

-- The common read grant, in straight-line code before any helper is
-- defined: a new read lease, not kept alive, of a lock without a writer
-- (not even an expired one), without anyone queued (qn), and with no
-- reader that may have expired (no reader, or rlo still ahead and the
-- readers' fairness the caller's). It writes S as the grant at the end of
-- this script does, in one HSET, a PEXPIREAT (to the new sx) only when S
-- must live longer than it was set to, and an HDEL only of a fairness flag
-- to clear. Each number it writes is formatted once, or is the caller's
-- string (see acquire.lua).
if mode == 'r' and ARGV[6] ~= '1' and not v[1] and not v[17] and (tonumber(v[15]) or 0) <= 0 then
  local rc, rlo = tonumber(v[11]) or 0, tonumber(v[12])
  if rc == 0 or (rlo and rlo > now_ms and (v[10] == '1') == fair) then
    local fence = rw_t[1] .. string.sub('000000' .. rw_t[2], -6)
    local last = tonumber(v[13])
    if last and last >= tonumber(fence) then
      fence = string.format('%d', last + 1)
    end
    local x = now_ms + ttl
    local xs = string.format('%d', x)
    local put = {'lf', fence, tok, '1,' .. ARGV[2] .. ',' .. fence .. ',0,0,0,' .. xs .. ',' .. ARGV[12],
      'rc', rc == 0 and '1' or rc + 1}
    local n = 6
    if not rlo or x < rlo then
      put[7], put[8], n = 'rlo', xs, 8
    end
    -- S outlives the lease by the fence retention
    local keep = x + tonumber(ARGV[3])
    local sx = keep > now_ms and (tonumber(v[14]) or 0) < keep and string.format('%d', keep)
    if sx then
      put[n + 1], put[n + 2], n = 'sx', sx, n + 2
    end
    if ARGV[14] ~= '1' then
      -- an earlier lease's loss reason and registry entry (lib/lost.lua)
      redis.call('HDEL', L, tok, '@' .. tok)
      redis.call('ZREM', R, ARGV[9])
    end
    if rc == 0 then
      if fair then
        put[n + 1], put[n + 2] = 'm', '1'
      elseif v[10] then
        redis.call('HDEL', S, 'm')
      end
    end
    redis.call('HSET', S, unpack(put))
    if sx then
      redis.call('PEXPIREAT', S, sx) -- sx is ahead of now_ms
    end
    redis.call('PUBLISH', C, 'acquired:' .. fence .. ':' .. ARGV[2])
    return {1, 1, tonumber(fence), ttl, now_ms, 0, fair and 1 or 0, 0, 0}
  end
end

--#include lib/rw.lua
--#include lib/lost.lua
local st = rw_load(S, tok, v)
rw_prune(st)
local writer = st.w
local held_fair = st.m == '1'

-- the queue, read only while someone waits: waiters past their deadline go,
-- and so do their queue entries
local queue, deadline = {}, {}
if st.qn > 0 then
  local ws = redis.call('ZRANGE', W, 0, -1, 'WITHSCORES')
  local gone = false
  for i = 1, #ws, 2 do
    local d = tonumber(ws[i + 1])
    if d > now_ms then deadline[ws[i]] = d else gone = true end
  end
  if gone then redis.call('ZREMRANGEBYSCORE', W, '-inf', now_ms) end
  local q = redis.call('LRANGE', Q, 0, -1)
  for _, e in ipairs(q) do
    if deadline[string.sub(e, 2)] then
      queue[#queue + 1] = e
    end
  end
  if #queue ~= #q then
    redis.call('DEL', Q)
    if #queue > 0 then
      redis.call('RPUSH', Q, unpack(queue))
      redis.call('PEXPIRE', Q, math.max((st.qx or 0) - now_ms, 1))
    end
  end
  if #queue ~= st.qn then
    st.qn = #queue
    if #queue > 0 then rw_put(st, 'qn', #queue) else rw_drop(st, 'qn') end
  end
end

-- acquired publishes a grant of the lease fenced fence for pttl ms
local function acquired(fence, pttl)
  redis.call('PUBLISH', C, 'acquired:' .. fence .. ':' .. pttl)
end

-- keepalive: the lease's TTL capped at its max-hold deadline, its registry
-- entry due at the earlier of its next renewal and the token's other lease's
local function keepalive(untl, lttl, fence, owner)
  local pttl = math.max(math.min(lttl, untl - now_ms), 1)
  if pttl < lttl then
    lost_record(L, tok, 'max_hold', untl, fence, owner, ARGV[10])
  end
  local due = math.min(now_ms + math.max(math.floor(lttl / 3), 1), untl)
  local cur = tonumber(redis.call('ZSCORE', R, ARGV[9]))
  if not cur or cur > due or cur <= now_ms then
    redis.call('ZADD', R, due, ARGV[9])
  end
  return pttl
end

local rv = st.mine

-- re-entries
if mode == 'w' and writer == tok then
  local count = st.wn + 1
  rw_put(st, 'wn', count)
  local lttl = ttl
  if ARGV[11] == '1' and st.wl then lttl = st.wl end
  local untl, hb = st.wku, st.wkh or 0
  local pttl = lttl
  if untl then
    rw_put(st, 'wkb', now_ms)
    pttl = keepalive(untl, lttl, st.wf, st.wo)
  end
  rw_put(st, 'wl', lttl)
  rw_put(st, 'wx', now_ms + pttl)
  rw_live(st, now_ms + pttl)
  rw_keep(st, math.max(pttl, (untl or 0) - now_ms) + tonumber(ARGV[3]))
  rw_flush(st)
  acquired(st.wf, pttl)
  return {2, count, tonumber(st.wf), pttl, now_ms, 0, held_fair and 1 or 0, untl or 0, hb}
end
if mode == 'r' and rv then
  local r = rw_reader(rv)
  r.n = r.n + 1
  local lttl = ttl
  if ARGV[11] == '1' then lttl = r.l end
  r.l = lttl
  local pttl = lttl
  if r.ku > 0 then
    r.kb = now_ms
    pttl = keepalive(r.ku, lttl, r.f, r.o)
  end
  r.x = now_ms + pttl
  rw_put(st, tok, rw_packed(r))
  rw_reader_until(st, r.x)
  rw_live(st, r.x)
  rw_keep(st, math.max(pttl, r.ku - now_ms) + tonumber(ARGV[3]))
  rw_flush(st)
  acquired(r.f, pttl)
  return {2, r.n, tonumber(r.f), pttl, now_ms, 0, held_fair and 1 or 0, r.ku > 0 and r.ku or 0, r.kh}
end
if mode == 'w' and rv then
  return {-4, 0, 0, 0, now_ms, 0, held_fair and 1 or 0, 0, 0}
end

local busy = writer or st.rc > 0 or #queue > 0
if busy and held_fair ~= fair then
  return {-3, 0, 0, 0, now_ms, 0, held_fair and 1 or 0, 0, 0}
end

-- what blocks the caller, and until when without a wake-up
local blocked, upto = false, nil
local function block(at)
  blocked = true
  if at and (not upto or at < upto) then upto = at end
end
if writer and writer ~= tok then
  block(st.wx)
end
if mode == 'w' and st.rc > 0 then
  block(st.rlo)
end
if #queue > 0 and not (mode == 'r' and writer == tok) then -- a downgrade is never queued
  local own = mode .. tok
  for _, e in ipairs(queue) do
    if e == own then break end
    if string.sub(e, 1, 1) == 'w' or (mode == 'w' and fair) then
      block(deadline[string.sub(e, 2)])
    end
  end
end

if blocked then
  local timeout = tonumber(ARGV[5])
  if timeout > 0 then
    -- a waiter already registered keeps its place and moves its deadline
    local dl = now_ms + timeout
    redis.call('ZADD', W, dl, tok)
    if not deadline[tok] then
      redis.call('RPUSH', Q, mode .. tok)
      st.qn = st.qn + 1
      rw_put(st, 'qn', st.qn)
    end
    if (st.qx or 0) < dl + 1000 then
      rw_put(st, 'qx', dl + 1000)
      redis.call('PEXPIRE', W, timeout + 1000)
      redis.call('PEXPIRE', Q, timeout + 1000)
    end
    if not busy then
      if fair then rw_put(st, 'm', '1') elseif st.m then rw_drop(st, 'm') end
    end
    rw_live(st, dl + 1000)
    rw_flush(st)
  end
  local wait = upto and math.max(upto - now_ms, 0) or 0
  local rem = 0
  if writer and writer ~= tok or (mode == 'w' and st.rc > 0) then rem = wait end
  return {0, 0, 0, rem, now_ms, wait, fair and 1 or 0, 0, 0}
end

-- granted
local fence = rw_fence(st, (ARGV[6] == '1' and tonumber(ARGV[7]) or ttl) + tonumber(ARGV[3]))
if deadline[tok] then
  redis.call('ZREM', W, tok)
  redis.call('LREM', Q, 0, mode .. tok)
  st.qn = st.qn - 1
  if st.qn > 0 then rw_put(st, 'qn', st.qn) else rw_drop(st, 'qn') end
end
if not busy then
  if fair then rw_put(st, 'm', '1') elseif st.m then rw_drop(st, 'm') end
end
local ka = ARGV[6] == '1'
if ARGV[14] ~= '1' then
  lost_forget(L, tok)
  if not ka and not rv and writer ~= tok then
    -- a registry entry left by an earlier lease of this token
    redis.call('ZREM', R, ARGV[9])
  end
end
local untl, hb = 0, 0
if ka then
  untl, hb = now_ms + tonumber(ARGV[7]), tonumber(ARGV[8])
end
local pttl = ttl
if ka then pttl = keepalive(untl, ttl, fence, ARGV[12]) end
if mode == 'w' then
  rw_put(st, 'w', tok)
  rw_put(st, 'wn', 1)
  rw_put(st, 'wf', fence)
  rw_put(st, 'wl', ttl)
  rw_put(st, 'wx', now_ms + pttl)
  if ARGV[12] ~= '' then rw_put(st, 'wo', ARGV[12]) end
  if ka then
    rw_put(st, 'wku', untl)
    rw_put(st, 'wkh', hb)
    rw_put(st, 'wkb', now_ms)
  end
else
  local x = now_ms + pttl
  rw_put(st, tok, rw_packed({n = 1, l = ttl, f = fence, ku = untl, kh = hb, kb = ka and now_ms or 0, x = x, o = ARGV[12]}))
  rw_add_reader(st, x)
end
rw_live(st, now_ms + pttl)
rw_flush(st)
acquired(fence, pttl)
return {1, 1, tonumber(fence), pttl, now_ms, 0, fair and 1 or 0, untl, hb}
