-- check.lua: POST /v1/ratelimit/check {"policy":POLICY,"key":"user-N"} for
-- one of KEYS keys. The KEYS requests are built once in init(); each thread
-- sends them in turn, from a starting point of its own.
--
-- Arguments (after wrk's --): POLICY KEYS
local reqs, n, i

function init(args)
	local policy, keys = args[1], tonumber(args[2])
	local host = wrk.headers["Host"]
	reqs, n = {}, keys
	for k = 0, keys - 1 do
		local body = string.format('{"policy":"%s","key":"user-%d"}', policy, k)
		reqs[k + 1] = "POST /v1/ratelimit/check HTTP/1.1\r\nHost: " .. host ..
			"\r\nContent-Type: application/json\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body
	end
	i = ((thread_id or 1) - 1) * 7919 % n
end

function request()
	i = i % n + 1
	return reqs[i]
end
