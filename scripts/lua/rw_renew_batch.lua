-- rw_renew_batch: renew a batch of keep-alive leases of read/write locks in
-- one call, as renew_batch.lua does for the exclusive lock. A registry entry
-- "rw/<token>:<name>" stands for every kept-alive lease the token holds on
-- that lock (its write lease, its read lease, or both during a downgrade):
-- each is checked against its own bounds and renewed, or lost.
--
-- KEYS[1]      keep-alive registry (zset: member -> next renewal due, ms)
-- KEYS[2i]     state hash of entry i's lock (its fields: see lib/rw.lua)
-- KEYS[2i+1]   lost-lease reasons of entry i's lock (hash: token -> reason)
-- ARGV[1]      how long lost-lease reasons are kept, in milliseconds
-- ARGV[1+i]    registry member of entry i ("rw/<token>:<name>")
--
-- Reply: {now_ms, code1, lag1_ms, reason1, ..., next_due_ms} as
-- renew_batch.lua's, with its codes:
--   0 skipped (not due or not registered), 1 renewed, 2 heartbeat missed,
--   3 lost (reason says why), 4 dropped (no lease is kept alive).
-- On Redis Cluster the registry is the shard of one hash slot, and a batch
-- names its entries only, whose locks share that slot.
--#include lib/rw_fields.lua
--#include lib/rw.lua
--#include lib/lost.lua
--#include lib/keepalive.lua
return renew_entries(function(i, m)
    local S, L = KEYS[2 * i], KEYS[2 * i + 1]
    local code, reason = 0, ''
    local tok = string.match(m, '^%a+/([^:]+):')
    local ok = pcall(function()
      local st = rw_load(S, tok)
      -- the token's kept-alive leases: {ttl, until, hb, hb_at, w, f, o, exp}
      local leases = {}
      local any = false
      if st.w == tok and (st.wx or 0) > now_ms then
        any = true
        if st.wku then
          leases[#leases + 1] = {ttl = st.wl, untl = st.wku, hb = st.wkh or 0, hb_at = st.wkb or 0, w = true,
            f = st.wf, o = st.wo, exp = st.wx}
        end
      end
      local r = st.mine and rw_reader(st.mine)
      if r and r.x > now_ms then
        any = true
        if r.ku > 0 then
          leases[#leases + 1] = {ttl = r.l, untl = r.ku, hb = r.kh, hb_at = r.kb, w = false, f = r.f, o = r.o, exp = r.x}
        end
      end
      if not any then
        code, reason = 3, redis.call('HGET', L, tok) or 'expired'
        lose(L, tok, reason, now_ms)
        redis.call('ZREM', KEYS[1], m)
        return
      end
      if #leases == 0 then
        code = 4
        redis.call('ZREM', KEYS[1], m)
        return
      end
      local nxt, renewed, missed = nil, false, false
      for _, l in ipairs(leases) do
        if now_ms >= l.untl then
          reason = 'max_hold'
          lose(L, tok, reason, l.untl, l.f, l.o)
          if l.w then
            rw_drop_writer(st)
          else
            rw_drop(st, tok)
            rw_sub_reader(st)
          end
        elseif l.hb > 0 and now_ms - l.hb_at > l.hb then
          missed = true
          reason = 'heartbeat_missed'
          lose(L, tok, reason, l.exp, l.f, l.o)
          if not nxt or l.exp < nxt then nxt = l.exp end
        else
          renewed = true
          local pttl, d, why = next_renewal(L, tok, l.ttl, l.untl, l.f, l.o)
          if why ~= '' then reason = why end
          if l.w then
            rw_put(st, 'wx', now_ms + pttl)
          else
            r.x = now_ms + pttl
            rw_put(st, tok, rw_packed(r))
            rw_reader_until(st, r.x)
          end
          -- S lives at least as long as the renewed leases (waiters may
          -- need it longer: never shortened here)
          rw_live(st, now_ms + pttl)
          if not nxt or d < nxt then nxt = d end
        end
      end
      if renewed then
        code = 1
        if reason == 'heartbeat_missed' then reason = '' end
      elseif missed then
        code = 2
      else
        code = 3
      end
      if nxt then
        redis.call('ZADD', KEYS[1], math.max(nxt, now_ms + 1), m)
      else
        redis.call('ZREM', KEYS[1], m)
      end
      rw_flush(st)
    end)
    if not ok then
      -- not a read/write lock's keys (written by something else): drop the
      -- entry rather than fail the whole batch on it, every time
      code, reason = 4, ''
      redis.call('ZREM', KEYS[1], m)
    end
    return code, reason
end)
