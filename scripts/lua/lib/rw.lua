-- lib/rw: the state of a read/write lock and the helpers of its scripts
-- (rw_*.lua), each of which includes this fragment after lib/rw_fields.lua
-- (the clock, now_ms, and the read of S). It changes nothing by itself.
--
-- A lock is one state hash S, alive while anyone holds or waits:
--   w, wn, wf, wl, wx, wo  the writer: token, hold count, fence, lease TTL
--        (ms), expiry (ms, Redis clock), owner text (absent for none)
--   wku, wkh, wkb  a keep-alive writer's max-hold deadline, heartbeat
--        interval and last heartbeat (ms)
--   m    "1" when fair (absent otherwise)
--   <token>  one field per reader, "n,l,f,ku,kh,kb,x,o": hold count, lease
--        TTL (ms), fence, keep-alive deadline, heartbeat interval and last
--        heartbeat (ms, 0 when not kept alive), expiry (ms), owner text
--        last. Tokens have at least 22 characters; no other field more
--        than 3.
--   rc   the readers' fields (an expired one counts until it is pruned)
--   rlo  no reader's lease ends before it (ms): the readers are read one
--        by one only once the Redis clock passes it, so a call learns what
--        the readers allow from this one field
--   lf   the last fence issued: the name's fence counter. S outlives the
--        longest lease it fenced by the fence retention, so a name's fences
--        keep increasing across its idle spells; with nobody holding or
--        waiting, lf is all it keeps
--   sx   when S expires (ms), as last set (absent: unknown)
--   qn   waiters queued, at most (one whose deadline passed counts until a
--        call prunes it): 0 means no queue to read
--   qx   when the waiters zset W and the queue Q expire (ms), as last set
-- W maps a waiter's token to its deadline (ms); Q lists "r<token>" and
-- "w<token>" in arrival order. Both exist only while someone waits.
--
-- A script reads S once (rw_fields, one HMGET, into a state table with
-- rw_load), changes its copy (rw_put, rw_drop) and writes it back once
-- (rw_flush, one HDEL and one HSET at most, and a PEXPIRE only when S must
-- live longer than it was set to, or once nobody holds it, for the
-- retention only).

-- rw_now_us is the Redis TIME in µs, as digits (a fence candidate).
local function rw_now_us()
  return rw_t[1] .. string.sub('000000' .. rw_t[2], -6)
end

-- rw_writer_fields are the writer's fields of S.
local rw_writer_fields = {'w', 'wn', 'wf', 'wl', 'wx', 'wo', 'wku', 'wkh', 'wkb'}

-- rw_load makes a state table of S's fields v as rw_fields read them
-- (with the field of token tok, when given; read here when v is nil): each
-- field by its name (numbers as numbers, absent ones false or nil), rc and
-- qn 0 when absent, mine the field of tok. Built without loops or tables
-- of names: a script's Lua costs more than its commands at this size.
local function rw_load(S, tok, v)
  v = v or rw_fields(S, tok)
  return {S = S, tok = tok, put = {}, del = {}, keep = 0,
    w = v[1], wn = tonumber(v[2]), wf = v[3], wl = tonumber(v[4]), wx = tonumber(v[5]), wo = v[6],
    wku = tonumber(v[7]), wkh = tonumber(v[8]), wkb = tonumber(v[9]), m = v[10], rc = tonumber(v[11]) or 0,
    rlo = tonumber(v[12]), lf = v[13], sx = tonumber(v[14]), qn = math.max(tonumber(v[15]) or 0, 0),
    qx = tonumber(v[16]), mine = tok and v[17] or false}
end

-- rw_put sets field f of S to val, rw_drop removes it (both in st, and in
-- Redis at rw_flush). put is a list of fields and values, in the order
-- set (a field set twice is written twice, the last value winning); del
-- the fields to remove, which rw_put takes out again.
local function rw_put(st, f, val)
  local put = st.put
  put[#put + 1] = f
  put[#put + 1] = val
  if st.del[f] then st.del[f] = nil end
end
local function rw_drop(st, f)
  st.del[f] = true
  local put = st.put
  for i = #put - 1, 1, -2 do
    if put[i] == f then
      table.remove(put, i + 1)
      table.remove(put, i)
    end
  end
end

-- rw_live keeps S for at least until (ms); rw_flush applies it.
local function rw_live(st, untl)
  if untl > st.keep then st.keep = untl end
end

-- rw_flush writes st's changes to S, and extends S's TTL when it must live
-- past what it was set to (st.exact: sets it to that, see rw_free).
local function rw_flush(st)
  if next(st.del) then
    local del = {}
    for f in pairs(st.del) do del[#del + 1] = f end
    redis.call('HDEL', st.S, unpack(del))
  end
  local ttl
  if st.exact then
    ttl = st.exact - now_ms
  elseif st.keep > now_ms and (st.sx or 0) < st.keep then
    rw_put(st, 'sx', st.keep)
    ttl = st.keep - now_ms
  end
  if #st.put > 0 then redis.call('HSET', st.S, unpack(st.put)) end
  if ttl then redis.call('PEXPIRE', st.S, math.max(ttl, 1)) end
end

-- rw_reader decodes a reader's field of S; rw_packed encodes one.
local function rw_reader(rv)
  local n, l, f, ku, kh, kb, x, o = string.match(rv, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(.*)$')
  return {n = tonumber(n), l = tonumber(l), f = f, ku = tonumber(ku), kh = tonumber(kh), kb = tonumber(kb),
    x = tonumber(x), o = o}
end
local function rw_packed(r)
  return string.format('%d,%d,%s,%d,%d,%d,%d,', r.n, r.l, r.f, r.ku, r.kh, r.kb, r.x) .. r.o
end

-- rw_is_reader says whether field f of S is a reader's (a token).
local function rw_is_reader(f)
  return #f >= 22
end

-- rw_drop_writer removes the writer from st.
local function rw_drop_writer(st)
  for _, f in ipairs(rw_writer_fields) do
    rw_drop(st, f)
    st[f] = false
  end
end

-- rw_add_reader counts a new reader expiring at x; rw_sub_reader uncounts
-- one; rw_reader_until records that a reader now expires at x.
local function rw_reader_until(st, x)
  if not st.rlo or x < st.rlo then
    st.rlo = x
    rw_put(st, 'rlo', x)
  end
end
local function rw_add_reader(st, x)
  st.rc = st.rc + 1
  rw_put(st, 'rc', st.rc)
  rw_reader_until(st, x)
end
local function rw_sub_reader(st)
  st.rc = math.max(st.rc - 1, 0)
  if st.rc == 0 then
    rw_drop(st, 'rc')
    rw_drop(st, 'rlo')
    st.rlo = nil
  else
    rw_put(st, 'rc', st.rc)
  end
end

-- rw_prune removes the expired writer and, once the clock has passed rlo,
-- the expired readers (then reading every reader's field, and setting rlo
-- to the soonest expiry of the rest), so an expired lease never blocks
-- anyone. st.mine is cleared when tok's read lease expired.
local function rw_prune(st)
  if st.w and (st.wx or 0) <= now_ms then
    rw_drop_writer(st)
  end
  if st.rc > 0 and (st.rlo or 0) <= now_ms then
    local all = redis.call('HGETALL', st.S)
    local n, lo = 0, nil
    for i = 1, #all, 2 do
      local f = all[i]
      if rw_is_reader(f) and not st.del[f] then
        local x = rw_reader(all[i + 1]).x
        if x <= now_ms then
          rw_drop(st, f)
          if f == st.tok then st.mine = false end
        else
          n = n + 1
          if not lo or x < lo then lo = x end
        end
      end
    end
    st.rc, st.rlo = n, lo
    if n > 0 then
      rw_put(st, 'rc', n)
      rw_put(st, 'rlo', lo)
    else
      rw_drop(st, 'rc')
      rw_drop(st, 'rlo')
    end
  end
end

-- rw_held says whether anyone holds the lock (after rw_prune).
local function rw_held(st)
  return st.w or st.rc > 0
end

-- rw_free: nobody holds the lock any more, so S outlives its last lease by
-- the retention (ms) only, or while someone waits; with nobody waiting it
-- keeps the fence alone.
local function rw_free(st, retention)
  local untl = now_ms + retention
  if st.qn > 0 then
    untl = math.max(untl, st.qx or 0)
  else
    rw_drop(st, 'm')
  end
  st.exact = untl
  rw_drop(st, 'sx') -- the next grant extends it again
end

-- rw_keep keeps S for at least ms more: a lease's span and the fence
-- retention after it. It never shortens S's TTL, which may cover another
-- holder's longer lease.
local function rw_keep(st, ms)
  rw_live(st, now_ms + ms)
end

-- rw_fence issues a fence above every earlier one of the name: max(lf + 1,
-- TIME in µs), as acquire.lua's, and keeps S for at least keep ms.
local function rw_fence(st, keep)
  local last = tonumber(st.lf)
  local fence = rw_now_us()
  if last and last >= tonumber(fence) then
    fence = string.format('%d', last + 1)
  end
  rw_put(st, 'lf', fence)
  st.lf = fence
  rw_keep(st, keep)
  return fence
end
