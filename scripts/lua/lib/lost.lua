-- lib/lost: the record of a lost lease in a name's lost-lease hash (token ->
-- reason), which inspect answers to the token's owner and the listing of
-- lost leases shows. Beside the reason of tok, the field '@' .. tok holds
-- "<lost_at_ms>:<fence>:<owner>": when the lease ended or ends (ms, Redis
-- clock), its fence and its owner text, each "" when the script recording
-- it no longer knows. Tokens are base64url: none starts with '@'. It
-- changes nothing by itself.
--
-- lost_record(lost, tok, reason, at_ms, fence, owner, keep_ms) records that
-- tok lost its lease for reason at at_ms, the hash kept keep_ms from now. A
-- record of the same reason stands: the first script to record it knew the
-- lease best (a renewer that finds the lease gone knows neither its fence
-- nor its owner).
local function lost_record(lost, tok, reason, at_ms, fence, owner, keep_ms)
  local v = redis.call('HMGET', lost, tok, '@' .. tok)
  if v[1] ~= reason or not v[2] then
    if type(fence) == 'number' then fence = string.format('%.0f', fence) end
    redis.call('HSET', lost, tok, reason, '@' .. tok,
      string.format('%.0f', at_ms) .. ':' .. (fence or '') .. ':' .. (owner or ''))
  end
  redis.call('PEXPIRE', lost, keep_ms)
end

-- lost_forget(lost, tok) forgets tok's record: its lease was released, was
-- renewed again after a missed heartbeat, or it was an earlier lease's.
local function lost_forget(lost, tok)
  redis.call('HDEL', lost, tok, '@' .. tok)
end
