-- rw_renew: extend a token's leases of a read/write lock (its write lease,
-- its read lease, or both). On a keep-alive lease this is also the
-- holder's heartbeat, and the TTL never reaches past its max-hold deadline.
--
-- KEYS[1]  state hash (its fields: see lib/rw.lua); kept, as a grant keeps
--          it, for at least the renewed leases' span and the fence
--          retention after it
-- KEYS[2]  lost-lease reasons of this lock (hash: token -> reason)
-- KEYS[3]  keep-alive registry (zset: member -> next renewal due, ms)
-- KEYS[4]  pub/sub channel that waiters and hold streams listen on
-- ARGV[1]  token (base64url)
-- ARGV[2]  new lease TTL in milliseconds; 0 renews for each lease's own TTL
-- ARGV[3]  how long lost-lease reasons are kept, in milliseconds
-- ARGV[4]  keep-alive registry member ("rw/<token>:<name>")
-- ARGV[5]  fence retention in milliseconds
-- ARGV[6]  mode: "w", "r", or "" for every lease the token holds
--
-- Reply: {status, hold_count, fence, ttl_ms, now_ms, ka_until_ms,
--         ka_heartbeat_ms, mode}
--   status 1 = renewed, -1 = no such lease and nobody holds the lock,
--   -2 = no such lease and another token holds it. The other fields are
--   those of the write lease when it was renewed, else the read lease's;
--   mode 1 = read, 2 = write. A new TTL that ends a lease sooner publishes
--   "shortened" on the channel.
--#include lib/rw_fields.lua
--#include lib/rw.lua
--#include lib/lost.lua
--#include lib/heartbeat.lua
local S, L, R, C = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local tok, mode = ARGV[1], ARGV[6]
local st = rw_load(S, tok)
rw_prune(st)
local want_w = (mode == 'w' or mode == '') and st.w == tok
local rv = (mode == 'r' or mode == '') and st.mine
if not want_w and not rv then
  if rw_held(st) then
    return {-2, 0, 0, 0, now_ms, 0, 0, 0}
  end
  return {-1, 0, 0, 0, now_ms, 0, 0, 0}
end
local ask = tonumber(ARGV[2])
local shortened, due = false, nil
local span = 0 -- the longest the renewed leases may last without another renewal
-- renew gives one lease its new expiry; returns its TTL (ms)
local function renew(lttl, untl, old_exp, fence, owner)
  local pttl = lttl
  if untl and untl > 0 then
    pttl = heartbeat(L, tok, ARGV[3], untl, lttl, now_ms, fence, owner)
    local d = math.min(now_ms + math.max(math.floor(lttl / 3), 1), untl)
    if not due or d < due then due = d end
  end
  if now_ms + pttl < old_exp then shortened = true end
  span = math.max(span, pttl, (untl or 0) - now_ms)
  rw_live(st, now_ms + pttl)
  return pttl
end
local out
if rv then
  local r = rw_reader(rv)
  local lttl = ask > 0 and ask or r.l
  r.l = lttl
  if r.ku > 0 then r.kb = now_ms end
  local pttl = renew(lttl, r.ku, r.x, r.f, r.o)
  r.x = now_ms + pttl
  rw_put(st, tok, rw_packed(r))
  rw_reader_until(st, r.x)
  out = {1, r.n, tonumber(r.f), pttl, now_ms, r.ku, r.kh, 1}
end
if want_w then
  local lttl = ask > 0 and ask or st.wl
  local untl = st.wku
  if untl then rw_put(st, 'wkb', now_ms) end
  local pttl = renew(lttl, untl, st.wx, st.wf, st.wo)
  rw_put(st, 'wl', lttl)
  rw_put(st, 'wx', now_ms + pttl)
  out = {1, st.wn, tonumber(st.wf), pttl, now_ms, untl or 0, st.wkh or 0, 2}
end
if due and ask > 0 then
  -- the next renewal was due on the old TTL's schedule
  redis.call('ZADD', R, due, ARGV[4])
end
rw_keep(st, span + tonumber(ARGV[5]))
rw_flush(st)
if shortened then
  redis.call('PUBLISH', C, 'shortened')
end
return out
