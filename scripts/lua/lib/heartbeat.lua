-- lib/heartbeat: a holder's renewal of its keep-alive lease, which is the
-- lease's heartbeat (renew.lua, rw_renew.lua, sem_renew.lua include it
-- after their header). It changes nothing by itself.
--
-- heartbeat(lost, tok, lost_ttl, untl, ttl, now_ms, fence, owner): lost is
-- the name's lost-lease hash (see lib/lost.lua, which a script includes
-- before this fragment), kept lost_ttl ms once written; untl the lease's
-- max-hold deadline and ttl the TTL asked for, in ms; fence and owner the
-- lease's. The renewer resumes if it had stopped: a "heartbeat_missed"
-- record of tok goes. A lease renewed to its deadline records "max_hold",
-- lost at the deadline. Returns the TTL the lease gets: ttl, cut to the
-- deadline (at least 1 ms).
local function heartbeat(lost, tok, lost_ttl, untl, ttl, now_ms, fence, owner)
  if redis.call('HGET', lost, tok) == 'heartbeat_missed' then
    lost_forget(lost, tok)
  end
  if untl - now_ms < ttl then
    lost_record(lost, tok, 'max_hold', untl, fence, owner, lost_ttl)
    return math.max(untl - now_ms, 1)
  end
  return ttl
end
