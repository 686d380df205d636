-- lib/rw: helpers of the read/write lock's scripts (rw_*.lua), each of which
-- includes this fragment after its header. It changes nothing by itself.
--
-- State (see rw_acquire.lua): a state hash S with the writer's fields
-- (w, wn, wf, wl, wx, wo, wku, wkh, wkb), the fairness flag m, and one
-- field per reader (its token -> "n,l,f,ku,kh,kb,o"); a readers zset H
-- (token -> the reader lease's expiry, ms); a waiters zset W (token ->
-- deadline, ms).
local rw_t = redis.call('TIME')
local now_ms = tonumber(rw_t[1]) * 1000 + math.floor(tonumber(rw_t[2]) / 1000)

-- rw_now_us is the Redis TIME in µs, as digits (a fence candidate).
local function rw_now_us()
  return rw_t[1] .. string.sub('000000' .. rw_t[2], -6)
end

-- rw_writer_fields are the writer's fields of S.
local rw_writer_fields = {'w', 'wn', 'wf', 'wl', 'wx', 'wo', 'wku', 'wkh', 'wkb'}

-- rw_prune removes the expired readers and the expired writer, so an
-- expired lease never blocks anyone. Returns the writer's token (false
-- when none) and the readers' count.
local function rw_prune(S, H)
  local gone = redis.call('ZRANGEBYSCORE', H, '-inf', now_ms)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', H, '-inf', now_ms)
    redis.call('HDEL', S, unpack(gone))
  end
  local w = redis.call('HMGET', S, 'w', 'wx')
  if w[1] and (tonumber(w[2]) or 0) <= now_ms then
    redis.call('HDEL', S, unpack(rw_writer_fields))
    w[1] = false
  end
  return w[1], redis.call('ZCARD', H)
end

-- rw_settle keeps S and H alive exactly while someone holds (or, with W,
-- waits), and deletes them otherwise.
local function rw_settle(S, H, W)
  local last = tonumber(redis.call('HGET', S, 'wx')) or 0
  local r = redis.call('ZRANGE', H, -1, -1, 'WITHSCORES')
  if #r > 0 then
    last = math.max(last, tonumber(r[2]))
    redis.call('PEXPIRE', H, math.max(tonumber(r[2]) - now_ms, 1))
  end
  if W then
    local w = redis.call('ZRANGE', W, -1, -1, 'WITHSCORES')
    if #w > 0 then last = math.max(last, tonumber(w[2])) end
  end
  if last > now_ms then
    redis.call('PEXPIRE', S, last - now_ms)
  else
    redis.call('DEL', S, H)
  end
end

-- rw_reader decodes a reader's field of S.
local function rw_reader(rv)
  local n, l, f, ku, kh, kb, o = string.match(rv, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(.*)$')
  return {n = tonumber(n), l = tonumber(l), f = f, ku = tonumber(ku), kh = tonumber(kh), kb = tonumber(kb), o = o}
end

-- rw_packed encodes a reader's field of S.
local function rw_packed(r)
  return r.n .. ',' .. r.l .. ',' .. r.f .. ',' .. r.ku .. ',' .. r.kh .. ',' .. r.kb .. ',' .. r.o
end

-- rw_keep keeps key K for at least ms more: a lease's span and the fence
-- retention after it. It never shortens K's TTL, which may cover another
-- holder's longer lease.
local function rw_keep(K, ms)
  if redis.call('PTTL', K) < ms then
    redis.call('PEXPIRE', K, ms)
  end
end

-- rw_fence issues a fence above every earlier one of the name: max(counter
-- + 1, TIME in µs), as acquire.lua's, and keeps the counter for at least
-- keep ms (rw_keep).
local function rw_fence(F, keep)
  local fence = rw_now_us()
  local last = tonumber(redis.call('GET', F))
  if last and last >= tonumber(fence) then
    fence = string.format('%d', last + 1)
  end
  redis.call('SET', F, fence, 'PX', math.max(redis.call('PTTL', F), keep))
  return fence
end

