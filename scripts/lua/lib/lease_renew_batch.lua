-- lib/lease_renew_batch.lua: the body of renew_batch.lua and
-- el_renew_batch.lua (see their headers): each entry's lease renewed, or
-- recorded lost, as lib/keepalive.lua's renew_entries does it. Needs
-- now_ms, lib/lost.lua, lib/keepalive.lua and member_token(m), the token of
-- a registry member.
return renew_entries(function(i, m)
  local lock, lost = KEYS[2 * i], KEYS[2 * i + 1]
  local tok = member_token(m)
  local v = redis.pcall('HMGET', lock, 't', 'l', 'ku', 'kh', 'kb', 'f', 'o')
  if type(v) ~= 'table' or v.err then
    -- not a lock hash (written by something else): drop the entry rather
    -- than fail the whole batch on it, every time
    redis.call('ZREM', KEYS[1], m)
    return 4, ''
  end
  local untl = tonumber(v[3])
  if v[1] ~= tok then
    -- gone or taken over: when, fence and owner are the record's, if any
    local reason = redis.call('HGET', lost, tok) or 'expired'
    lose(lost, tok, reason, now_ms)
    redis.call('ZREM', KEYS[1], m)
    return 3, reason
  elseif not untl then
    redis.call('ZREM', KEYS[1], m)
    return 4, ''
  elseif now_ms >= untl then
    redis.call('DEL', lock)
    lose(lost, tok, 'max_hold', untl, v[6], v[7])
    redis.call('ZREM', KEYS[1], m)
    return 3, 'max_hold'
  end
  local ttl = tonumber(v[2])
  local hb, hb_at = tonumber(v[4]) or 0, tonumber(v[5]) or 0
  if hb > 0 and now_ms - hb_at > hb then
    local ends = now_ms + math.max(redis.call('PTTL', lock), 1)
    lose(lost, tok, 'heartbeat_missed', ends, v[6], v[7])
    redis.call('ZADD', KEYS[1], ends, m)
    return 2, 'heartbeat_missed'
  end
  local pttl, nxt, reason = next_renewal(lost, tok, ttl, untl, v[6], v[7])
  -- the stored TTL's own string when it is the TTL: see acquire.lua
  if pttl == ttl and string.find(v[2], '^%d+$') then
    pttl = v[2]
  end
  redis.call('PEXPIRE', lock, pttl)
  redis.call('ZADD', KEYS[1], nxt, m)
  return 1, reason
end)
