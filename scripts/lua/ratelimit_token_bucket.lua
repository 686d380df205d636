-- ratelimit_token_bucket: a token bucket as GCRA (the generic cell rate
-- algorithm), as in redis_rate. The bucket refills at limit tokens per
-- window and holds at most burst tokens. Its whole state is one number, the
-- theoretical arrival time (TAT), kept in microseconds by the Redis clock.
-- Denied requests change nothing.
--
-- KEYS[1]  TAT in microseconds (string); expires when the bucket is full again
-- ARGV[1]  limit: tokens added per window, >= 1
-- ARGV[2]  window in milliseconds, >= 1
-- ARGV[3]  burst: bucket capacity, >= 1
-- ARGV[4]  cost of this request, 1 <= cost <= burst
--
-- Reply: {allowed, remaining, reset_ms, retry_after_ms}
--   allowed         1 = allowed (tokens taken), 0 = denied (nothing taken)
--   remaining       whole tokens left in the bucket after this decision
--   reset_ms        time until the bucket is full again
--   retry_after_ms  0 when allowed; else when enough tokens for the same
--                   request will be in the bucket (rounded up, plus 1 ms)
local limit = tonumber(ARGV[1])
local window_us = tonumber(ARGV[2]) * 1000
local burst = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = window_us / limit      -- microseconds per token
local tolerance = interval * burst      -- how far TAT may run ahead of now

local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new_tat = tat + interval * cost
local diff = now - (new_tat - tolerance)

if diff < 0 then
  local remaining = math.max(math.floor((now - (tat - tolerance)) / interval), 0)
  return {0, remaining, math.ceil((tat - now) / 1000), math.ceil(-diff / 1000) + 1}
end

local reset_us = new_tat - now
-- Whole microseconds: Redis keeps an integer value in the key itself
-- (about 30 bytes less per key than a decimal string).
new_tat = math.ceil(new_tat)
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil(reset_us / 1000))
return {1, math.floor(diff / interval), math.ceil(reset_us / 1000), 0}
