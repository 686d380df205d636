-- rw_release: drop one hold of a token's read or write lease of a
-- read/write lock. The last hold of the write lease publishes "released",
-- a wake-up for every waiter; the last hold of the last reader "drained",
-- a wake-up for waiting writers only (a waiting reader is blocked by a
-- writer, holding or queued ahead of it, never by readers).
--
-- KEYS[1]  state hash (its fields: see lib/rw.lua); when nobody holds the
--          lock any more it is kept for the fence retention only (and
--          while someone waits)
-- KEYS[2]  pub/sub channel that waiters of this lock listen on
-- KEYS[3]  keep-alive registry (zset)
-- KEYS[4]  lost-lease reasons of this lock (hash: token -> reason)
-- ARGV[1]  token (base64url)
-- ARGV[2]  mode: "w" write, "r" read, "" the token's write lease when it
--          holds one, else its read lease
-- ARGV[3]  keep-alive registry member ("rw/<token>:<name>")
-- ARGV[4]  fence retention in milliseconds
--
-- Reply: {status, hold_count, mode}
--   status 1 = released (hold_count is what remains of that lease),
--   -1 = no such lease (expired or released) and nobody holds the lock,
--   -2 = no such lease, and another token holds the lock;
--   mode 1 = the read lease, 2 = the write lease.
-- The common release of a read lease is straight-line code before
-- lib/rw.lua's helpers are defined, which changes exactly what the general
-- code would.
--#include lib/rw_fields.lua
local S, C, R, L = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local tok, mode = ARGV[1], ARGV[2]
local v = rw_fields(S, tok)

-- The common release, in straight-line code before any helper is defined:
-- of the token's read lease, on a lock without a writer (not even an
-- expired one) and with no reader that may have expired (rlo still ahead,
-- so the token's lease has not either). It writes S as the general release
-- below does: the hold count, or the reader's field and the count of
-- readers, and for the last reader the retention.
local rv, rc, rlo = v[17], tonumber(v[11]) or 0, tonumber(v[12])
if mode ~= 'w' and rv and not v[1] and rc > 0 and rlo and rlo > now_ms then
  -- rv is "n,l,f,ku,...": its hold count first, ku 0 unless kept alive
  local c = string.find(rv, ',', 1, true)
  local n = tonumber(string.sub(rv, 1, c - 1))
  if n > 1 then
    redis.call('HSET', S, tok, (n - 1) .. string.sub(rv, c))
    return {1, n - 1, 1}
  end
  if not string.find(rv, '^%d+,%d+,%d+,0,') then
    -- kept alive: no renewal may follow, and a released lease is not lost
    redis.call('ZREM', R, ARGV[3])
    redis.call('HDEL', L, tok, '@' .. tok)
  end
  if rc > 1 then
    redis.call('HDEL', S, tok)
    redis.call('HSET', S, 'rc', rc - 1)
    return {1, 0, 1}
  end
  -- the last reader: S is kept for the retention only (the caller's
  -- string, see acquire.lua), or while someone waits; with nobody waiting
  -- it loses its fairness, as rw_free has it
  local keep = ARGV[4]
  if (tonumber(v[15]) or 0) > 0 then
    redis.call('HDEL', S, tok, 'rc', 'rlo', 'sx')
    keep = math.max(tonumber(keep), (tonumber(v[16]) or 0) - now_ms, 1)
  else
    redis.call('HDEL', S, tok, 'rc', 'rlo', 'sx', 'm')
    if tonumber(keep) < 1 then keep = 1 end
  end
  redis.call('PEXPIRE', S, keep)
  redis.call('PUBLISH', C, 'drained')
  return {1, 0, 1}
end

--#include lib/rw.lua
--#include lib/lost.lua
local st = rw_load(S, tok, v)
rw_prune(st)
local writer = st.w
if mode == '' then
  mode = writer == tok and 'w' or 'r'
end
local m = mode == 'w' and 2 or 1
local rv = mode == 'r' and st.mine
if (mode == 'w' and writer ~= tok) or (mode == 'r' and not rv) then
  if rw_held(st) then
    return {-2, 0, m}
  end
  return {-1, 0, m}
end
local count, kept, ka_left
if mode == 'w' then
  count = st.wn - 1
  if count > 0 then
    rw_put(st, 'wn', count)
  else
    kept = st.wku
    rw_drop_writer(st)
    ka_left = st.mine and rw_reader(st.mine).ku > 0
  end
else
  local r = rw_reader(rv)
  r.n = r.n - 1
  count = r.n
  if count > 0 then
    rw_put(st, tok, rw_packed(r))
  else
    kept = r.ku > 0
    rw_drop(st, tok)
    rw_sub_reader(st)
    ka_left = writer == tok and st.wku
  end
end
if count <= 0 and kept then
  if not ka_left then
    -- no renewal may follow: the token keeps no other kept-alive lease here
    redis.call('ZREM', R, ARGV[3])
  end
  lost_forget(L, tok) -- a released lease is not lost (nor at its max hold)
end
local freed = count <= 0 and not rw_held(st)
if freed then
  rw_free(st, tonumber(ARGV[4]))
end
rw_flush(st)
if count <= 0 and mode == 'w' then
  redis.call('PUBLISH', C, 'released')
elseif count <= 0 and st.rc == 0 then
  redis.call('PUBLISH', C, 'drained')
end
return {1, math.max(count, 0), m}
