-- lib/rw_fields: the Redis clock (rw_t, now_ms) and the one read of a
-- read/write lock's state hash S (its fields: see lib/rw.lua) that a
-- rw_*.lua script decides on (rw_inspect reads S whole, and takes the clock
-- only). Each of them includes this fragment after its header, and
-- lib/rw.lua after it: a script's straight-line fast path may stand between
-- the two, so that the common request defines none of lib/rw.lua's helpers
-- (on this Redis, defining them all costs more than a command does). It
-- changes nothing by itself.
local rw_t = redis.call('TIME')
local now_ms = tonumber(rw_t[1]) * 1000 + math.floor(tonumber(rw_t[2]) / 1000)

-- rw_fields reads S with one HMGET: v[1] to v[16] are w, wn, wf, wl, wx,
-- wo, wku, wkh, wkb, m, rc, rlo, lf, sx, qn, qx (false when absent), v[17]
-- the field of token tok (without tok, w again). rw_load makes a state
-- table of them.
local function rw_fields(S, tok)
  return redis.call('HMGET', S, 'w', 'wn', 'wf', 'wl', 'wx', 'wo', 'wku', 'wkh', 'wkb', 'm', 'rc', 'rlo', 'lf',
    'sx', 'qn', 'qx', tok or 'w')
end
