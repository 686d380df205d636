-- lib/sem.lua: a semaphore's leases hash, which the sem_*.lua scripts share.
-- Each lease is the field of its token (base64url: none starts with '#'),
-- "count:expiry:fence:ttl_ms:ku:kh:kb:owner": the permits it holds, its
-- expiry (ms, Redis clock), its fence, its TTL, ku the keep-alive max-hold
-- deadline (ms, 0 when not kept alive), kh the heartbeat interval (ms, 0
-- for none), kb the last heartbeat (ms) and the owner text. Beside them:
--   '#u'  the permits in use: the counts of every lease field, summed
--   '#e'  a time no later than the earliest expiry of those leases (ms):
--         while it is ahead no lease has expired, and no script looks at
--         the leases one by one; once it has passed, the next script
--         drops the leases past their expiry, whose permits are free at
--         once, and sets it to the earliest expiry left
--   '#x'  when the scripts last set the hash to expire (ms)
-- A hash with no lease left is deleted. It changes nothing by itself.

-- sem_lease reads a lease's value: count, expiry, fence, ttl_ms, ku, kh, kb
-- and owner, as strings; nothing when v is not one (false: no lease).
local function sem_lease(v)
  if not v then
    return nil
  end
  return string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+):(%d+):(.*)$')
end

-- The version before this one kept a lease's expiry in a holders zset
-- (token -> expiry), its value in the leases hash "count:fence:ttl_ms:ku:
-- kh:kb:owner", with no '#u'. sem_from_legacy is such a value in this
-- layout, its expiry ends (ms): the legacy hash's own expiry, which that
-- version kept for the longest lease, so its permits stay taken for at
-- least as long as before; nil when v is not one.
local function sem_from_legacy(v, ends)
  local count, rest = string.match(v, '^(%d+):(%d+:%d+:%d+:%d+:%d+:.*)$')
  if not count then
    return nil
  end
  return count .. ':' .. string.format('%.0f', ends) .. ':' .. rest
end

-- sem_legacy_end is when a legacy leases hash's leases end (see
-- sem_from_legacy): its expiry, or a minute from now when it has none.
local function sem_legacy_end(leases, now_ms)
  local pttl = redis.call('PTTL', leases)
  if pttl < 0 then
    pttl = 60000
  end
  return now_ms + pttl
end

-- sem_upgrade rewrites a legacy leases hash in this layout, in place;
-- false when there is no hash.
local function sem_upgrade(leases, now_ms)
  local all = redis.call('HGETALL', leases)
  if #all == 0 then
    return false
  end
  local ends = sem_legacy_end(leases, now_ms)
  local out, u = {}, 0
  for i = 1, #all, 2 do
    local v = sem_from_legacy(all[i + 1], ends)
    if v then
      table.insert(out, all[i])
      table.insert(out, v)
      u = u + tonumber(string.match(v, '^%d+'))
    end
  end
  if u == 0 then
    redis.call('DEL', leases)
    return true
  end
  redis.call('HSET', leases, '#u', u, '#e', ends, '#x', ends, unpack(out))
  return true
end

-- sem_hmget is HMGET of '#u' and the fields named after it in the leases
-- hash, once a legacy hash is upgraded (sem_upgrade): a hash with no '#u'
-- and a lease among the fields read is one, and so may be any hash with no
-- '#u' when maybe_legacy (this version has not written the semaphore's
-- capacity record yet).
local function sem_hmget(leases, now_ms, maybe_legacy, ...)
  local r = redis.call('HMGET', leases, '#u', ...)
  if r[1] then
    return r
  end
  local lease = maybe_legacy
  for i = 2, #r do
    lease = lease or r[i] ~= false
  end
  if lease and sem_upgrade(leases, now_ms) then
    r = redis.call('HMGET', leases, '#u', ...)
  end
  return r
end

-- sem_prune drops every lease of the leases hash past its expiry and sets
-- '#u' and '#e' from the leases left (or deletes the hash when none is
-- left). Returns the permits in use, the earliest expiry (nil when no
-- lease is left) and the value of tok's lease (nil when none is left).
local function sem_prune(leases, tok, now_ms)
  local all = redis.call('HGETALL', leases)
  local gone, u, e, v = {}, 0, nil, nil
  for i = 1, #all, 2 do
    local f = all[i]
    if string.sub(f, 1, 1) ~= '#' then
      local count, expiry = sem_lease(all[i + 1])
      expiry = tonumber(expiry)
      if not expiry or expiry <= now_ms then
        gone[#gone + 1] = f
      else
        u = u + tonumber(count)
        if not e or expiry < e then
          e = expiry
        end
        if f == tok then
          v = all[i + 1]
        end
      end
    end
  end
  if u == 0 then
    redis.call('DEL', leases)
  else
    if #gone > 0 then
      redis.call('HDEL', leases, unpack(gone))
    end
    redis.call('HSET', leases, '#u', u, '#e', e)
  end
  return u, e, v
end

-- sem_read reads the leases hash's permits in use, earliest expiry and
-- expiry ('#u', '#e', '#x'; 0, nil and nil when it has none) and tok's
-- lease (nil when none), in one call (sem_hmget), and prunes the hash
-- first when a lease may have expired (sem_prune): the permits of an
-- expired lease are free before anything is decided.
local function sem_read(leases, tok, now_ms, maybe_legacy)
  local r = sem_hmget(leases, now_ms, maybe_legacy, '#e', '#x', tok)
  local st = {u = tonumber(r[1]) or 0, e = tonumber(r[2]), x = tonumber(r[3]), v = r[4] or nil}
  if st.e and st.e <= now_ms then
    st.u, st.e, st.v = sem_prune(leases, tok, now_ms)
    if st.u == 0 then
      st.x = nil
    end
  end
  return st
end

-- sem_until is when a key that the scripts last set to expire at at (ms,
-- nil when not known) expires once it is kept until until_ms at least, and
-- whether that is a change: a key's expiry is never brought forward, as it
-- may cover another lease's longer span. A change keeps it slack_ms longer
-- still, so the grants that follow need none. The caller sets it with
-- PEXPIRE and records it.
local function sem_until(at, until_ms, slack_ms)
  if at and at >= until_ms then
    return at, false
  end
  return until_ms + slack_ms, true
end

-- sem_slack is how much longer than a lease's span, ending at span_end,
-- its leases hash is kept when the hash's expiry moves: as long again, at
-- most a minute. Only a semaphore nobody calls keeps expired leases that
-- long; a hash with no lease left is deleted.
local function sem_slack(span_end, now_ms)
  return math.min(span_end - now_ms, 60000)
end
