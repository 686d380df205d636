-- gate.lua: GET PATH with one of KEYS client IPs in X-Forwarded-For
-- (10.x.y.z, as latchbench's clientIP maps key N) and, when APIKEY is 1,
-- X-Api-Key: key-N for the same N. The KEYS requests are built once in
-- init(); each thread sends them in turn, from a starting point of its own.
--
-- Arguments (after wrk's --): PATH KEYS APIKEY
local reqs, n, i

function init(args)
	local path, keys, apikey = args[1], tonumber(args[2]), args[3] == "1"
	local host = wrk.headers["Host"]
	reqs, n = {}, keys
	for k = 0, keys - 1 do
		local ip = string.format("10.%d.%d.%d", math.floor(k / 65536) % 256, math.floor(k / 256) % 256, k % 256)
		local r = "GET " .. path .. " HTTP/1.1\r\nHost: " .. host .. "\r\nX-Forwarded-For: " .. ip .. "\r\n"
		if apikey then
			r = r .. "X-Api-Key: key-" .. k .. "\r\n"
		end
		reqs[k + 1] = r .. "\r\n"
	end
	i = ((thread_id or 1) - 1) * 7919 % n
end

function request()
	i = i % n + 1
	return reqs[i]
end
