-- rw_acquire: take a read or write lease of a read/write lock, or re-enter
-- one with the owning token. Many readers or one writer; a writer may take
-- the read lease with its token (a downgrade); a reader asking for write is
-- refused (an upgrade). A caller willing to wait is registered as a waiter
-- and queued in arrival order (in both modes); readers never pass a writer
-- queued ahead of them (no writer starvation), and in fair mode a writer
-- never passes anyone queued ahead of it.
--
-- KEYS[1]  state hash. Writer fields: w token, wn hold count, wf fence,
--          wl lease TTL (ms), wx expiry (ms, Redis clock), wo owner text
--          (absent for none), and for a keep-alive writer wku max-hold
--          deadline, wkh heartbeat interval, wkb last heartbeat (ms).
--          m "1" when fair (absent otherwise). Each reader: field = its
--          token, value "n,l,f,ku,kh,kb,o" (hold count, lease TTL ms, fence,
--          keep-alive deadline/heartbeat/last heartbeat ms, 0 when not kept
--          alive, owner text last). Lives while anyone holds or waits.
-- KEYS[2]  fence counter (string); every grant, re-entries included, keeps
--          it for at least the lease's span (its TTL, or for a keep-alive
--          lease its max hold) and the fence retention (ARGV[3]) after it
-- KEYS[3]  waiters zset: member = waiter token, score = its deadline (ms)
-- KEYS[4]  queue list: "r<token>" / "w<token>" of waiters in arrival order
-- KEYS[5]  keep-alive registry (zset: member -> next renewal due, ms)
-- KEYS[6]  lost-lease reasons of this lock (hash: token -> reason)
-- KEYS[7]  readers zset: member = reader token, score = its lease's expiry (ms)
-- KEYS[8]  pub/sub channel of the lock's wake-ups: every grant, read or
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
--
-- Reply: {status, hold_count, fence, ttl_ms, now_ms, recheck_ms, fair,
--         ka_until_ms, ka_heartbeat_ms}
--   status 1 = new grant, 2 = reentrant grant, 0 = not granted,
--         -3 = fairness mismatch (the lock is fair and the caller is not, or
--              the other way round), -4 = upgrade refused (the token holds
--              the read lease and asked for write)
--   When not granted, ttl_ms is the remaining TTL of what blocks the caller
--   (0 when only the queue does) and recheck_ms the latest time to try again
--   without a wake-up.
-- Every new grant, read or write, gets the fence max(counter + 1, TIME in µs),
-- as acquire.lua's; an expired lease (by its expiry, the Redis clock) is
-- removed before anything is decided, so it never blocks anyone.
--#include lib/rw.lua
--#include lib/lost.lua
local S, F, W, Q, R, L, H, C = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local tok, mode, fair = ARGV[1], ARGV[13], ARGV[4] == '1'
local ttl = tonumber(ARGV[2])
local writer, readers = rw_prune(S, H)
local v = redis.call('HMGET', S, 'w', 'wn', 'wf', 'wl', 'wx', 'm')

-- waiters past their deadline go, and so do their queue entries; the
-- deadlines of the others are read once (one ZRANGE, not a ZSCORE per
-- queued waiter on every attempt)
local queue, deadline = {}, {}
if redis.call('EXISTS', W) == 1 then
  redis.call('ZREMRANGEBYSCORE', W, '-inf', now_ms)
  local ws = redis.call('ZRANGE', W, 0, -1, 'WITHSCORES')
  for i = 1, #ws, 2 do
    deadline[ws[i]] = tonumber(ws[i + 1])
  end
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
      redis.call('PEXPIRE', Q, math.max(redis.call('PTTL', W), 1))
    end
  end
end

local function settle() rw_settle(S, H, W) end

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

local rv = readers > 0 and redis.call('HGET', S, tok)

-- re-entries
if mode == 'w' and writer == tok then
  local count = redis.call('HINCRBY', S, 'wn', 1)
  local lttl = ttl
  if ARGV[11] == '1' and tonumber(v[4]) then lttl = tonumber(v[4]) end
  local kv = redis.call('HMGET', S, 'wku', 'wkh')
  local untl, hb = tonumber(kv[1]), tonumber(kv[2]) or 0
  local pttl = lttl
  if untl then
    redis.call('HSET', S, 'wkb', now_ms)
    pttl = keepalive(untl, lttl, v[3], redis.call('HGET', S, 'wo'))
  end
  redis.call('HSET', S, 'wl', lttl, 'wx', now_ms + pttl)
  rw_keep(F, math.max(pttl, (untl or 0) - now_ms) + tonumber(ARGV[3]))
  settle()
  acquired(v[3], pttl)
  return {2, count, tonumber(v[3]), pttl, now_ms, 0, v[6] == '1' and 1 or 0, untl or 0, hb}
end
if mode == 'r' and rv then
  local r = rw_reader(rv)
  r.n = r.n + 1
  local lttl = ttl
  if ARGV[11] == '1' then lttl = tonumber(r.l) end
  r.l = lttl
  local pttl = lttl
  if r.ku > 0 then
    r.kb = now_ms
    pttl = keepalive(r.ku, lttl, r.f, r.o)
  end
  redis.call('HSET', S, tok, rw_packed(r))
  redis.call('ZADD', H, now_ms + pttl, tok)
  rw_keep(F, math.max(pttl, r.ku - now_ms) + tonumber(ARGV[3]))
  settle()
  acquired(r.f, pttl)
  return {2, r.n, tonumber(r.f), pttl, now_ms, 0, v[6] == '1' and 1 or 0, r.ku > 0 and r.ku or 0, r.kh}
end
if mode == 'w' and rv then
  return {-4, 0, 0, 0, now_ms, 0, v[6] == '1' and 1 or 0, 0, 0}
end

local busy = writer or readers > 0 or #queue > 0
local held_fair = v[6] == '1'
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
  block(tonumber(v[5]))
end
if mode == 'w' and readers > 0 then
  local first = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
  block(tonumber(first[2]))
end
if not (mode == 'r' and writer == tok) then -- a downgrade is never queued
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
    local new = redis.call('ZADD', W, now_ms + timeout, tok) == 1
    local last = redis.call('ZRANGE', W, -1, -1, 'WITHSCORES')
    local keep = tonumber(last[2]) - now_ms + 1000
    redis.call('PEXPIRE', W, keep)
    if new then
      redis.call('LREM', Q, 0, 'r' .. tok)
      redis.call('LREM', Q, 0, 'w' .. tok)
      redis.call('RPUSH', Q, mode .. tok)
    end
    redis.call('PEXPIRE', Q, keep)
    if new and not busy then
      if fair then redis.call('HSET', S, 'm', '1') else redis.call('HDEL', S, 'm') end
    end
    settle()
  end
  local wait = upto and math.max(upto - now_ms, 0) or 0
  local rem = 0
  if writer and writer ~= tok or (mode == 'w' and readers > 0) then rem = wait end
  return {0, 0, 0, rem, now_ms, wait, fair and 1 or 0, 0, 0}
end

-- granted
local fence = rw_fence(F, (ARGV[6] == '1' and tonumber(ARGV[7]) or ttl) + tonumber(ARGV[3]))
if #queue > 0 then
  redis.call('ZREM', W, tok)
  redis.call('LREM', Q, 0, mode .. tok)
end
if not (writer or readers > 0 or #queue > 0) then
  if fair then redis.call('HSET', S, 'm', '1') else redis.call('HDEL', S, 'm') end
end
lost_forget(L, tok)
local ka = ARGV[6] == '1'
local untl, hb = 0, 0
if ka then
  untl, hb = now_ms + tonumber(ARGV[7]), tonumber(ARGV[8])
elseif not rv and writer ~= tok then
  -- a registry entry left by an earlier lease of this token
  redis.call('ZREM', R, ARGV[9])
end
local pttl = ttl
if ka then pttl = keepalive(untl, ttl, fence, ARGV[12]) end
if mode == 'w' then
  local fields = {'w', tok, 'wn', 1, 'wf', fence, 'wl', ARGV[2], 'wx', now_ms + pttl}
  if ARGV[12] ~= '' then
    fields[#fields + 1], fields[#fields + 2] = 'wo', ARGV[12]
  end
  if ka then
    for _, x in ipairs({'wku', untl, 'wkh', hb, 'wkb', now_ms}) do fields[#fields + 1] = x end
  end
  redis.call('HSET', S, unpack(fields))
else
  local kb = ka and now_ms or 0
  redis.call('HSET', S, tok, rw_packed({n = 1, l = ARGV[2], f = fence, ku = untl, kh = hb, kb = kb, o = ARGV[12]}))
  redis.call('ZADD', H, now_ms + pttl, tok)
end
settle()
acquired(fence, pttl)
return {1, 1, tonumber(fence), pttl, now_ms, 0, fair and 1 or 0, untl, hb}
