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
--   '#c'  when the scripts last set the capacity record to expire (ms),
--         absent when not known: the record's expiry is only moved
--         forward while the hash is kept, and the scripts that bring it
--         back (a release or force-release of the last lease) delete the
--         hash, so the next grant sets the record's expiry again. A hash
--         written before it was kept has none: its record says it in a
--         field x, which the next grant moves here
--   '#p'  the capacity N as the capacity record has it (its p), so a
--         release tells how many permits are free without reading the
--         record; absent in a hash written before it was kept (a script
--         then reads the record's p)
-- A hash with no lease left is deleted. A legacy hash, the version before
-- this one's (see sem_scan), has leases and no '#u', and its capacity
-- record the m that version wrote on every grant ("0" or "1") and no x;
-- this one writes m for a fair semaphore only. The first script that meets
-- one rewrites it (sem_scan's upgrade): a hash with no '#u' and the lease
-- a script reads is one. It changes nothing by itself.

-- sem_lease reads a lease's value: count, expiry, fence, ttl_ms, ku, kh, kb
-- and owner, as strings; nothing when v is not one (false: no lease).
local function sem_lease(v)
  if not v then
    return nil
  end
  return string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+):(%d+):(.*)$')
end

-- sem_scan returns the helpers that go over every field of a leases hash,
-- which a call needs only on the paths it seldom takes (a legacy hash,
-- leases past their expiry): Lua makes a function each time its definition
-- runs, so a script would pay for them on every call if they were defined
-- beside the others.
local function sem_scan()
  local scan = {}

  -- The version before this one kept a lease's expiry in a holders zset
  -- (token -> expiry), its value in the leases hash "count:fence:ttl_ms:ku:
  -- kh:kb:owner", with no '#u'. from_legacy is such a value in this
  -- layout, its expiry ends (ms): the legacy hash's own expiry, which that
  -- version kept for the longest lease, so its permits stay taken for at
  -- least as long as before; nil when v is not one.
  function scan.from_legacy(v, ends)
    local count, rest = string.match(v, '^(%d+):(%d+:%d+:%d+:%d+:%d+:.*)$')
    if not count then
      return nil
    end
    return count .. ':' .. string.format('%.0f', ends) .. ':' .. rest
  end

  -- legacy_end is when a legacy leases hash's leases end (see
  -- from_legacy): its expiry, or a minute from now when it has none.
  function scan.legacy_end(leases, now_ms)
    local pttl = redis.call('PTTL', leases)
    if pttl < 0 then
      pttl = 60000
    end
    return now_ms + pttl
  end

  -- upgrade rewrites a legacy leases hash in this layout, in place; false
  -- when there is no hash.
  function scan.upgrade(leases, now_ms)
    local all = redis.call('HGETALL', leases)
    if #all == 0 then
      return false
    end
    local ends = scan.legacy_end(leases, now_ms)
    local out, u = {}, 0
    for i = 1, #all, 2 do
      local v = scan.from_legacy(all[i + 1], ends)
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

  -- prune drops every lease of the leases hash past its expiry and sets
  -- '#u' and '#e' from the leases left (or deletes the hash when none is
  -- left). Returns the permits in use, the earliest expiry (nil when no
  -- lease is left) and the value of tok's lease (nil when none is left).
  function scan.prune(leases, tok, now_ms)
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

  return scan
end

-- sem_until is when a key that the scripts last set to expire at at (ms,
-- nil when not known) expires once it is kept until until_ms at least, and
-- whether that is a change: a key's expiry is never brought forward, as it
-- may cover another lease's longer span. Given now_ms (the leases hash's),
-- a change keeps it as long again as until_ms is ahead of now_ms, a minute
-- at most, so the grants that follow need none: only a semaphore nobody
-- calls keeps expired leases that long, and a hash with no lease left is
-- deleted. The caller sets it with PEXPIRE and records it.
local function sem_until(at, until_ms, now_ms)
  if at and at >= until_ms then
    return at, false
  end
  if now_ms then
    return until_ms + math.min(until_ms - now_ms, 60000), true
  end
  return until_ms, true
end

-- sem_str is the whole number n as a string, for a field's value or an
-- argument of redis.call: a Lua number is formatted there with %.17g (and
-- by .. and tostring with %.14g), at twice the cost of %d.
local function sem_str(n)
  return string.format('%d', n)
end
