-- lib/clock.lua: reads the Redis clock once per call.
-- Defines now_ms (milliseconds, with the microseconds as a fraction) and
-- now_us (whole microseconds).
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
