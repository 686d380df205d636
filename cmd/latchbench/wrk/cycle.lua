-- cycle.lua: an acquire/release cycle (lock, election, contended, rwlock,
-- semaphore): POST to a lease's path with a JSON body and, when granted
-- (201), DELETE at the answer's Location with its Lock-Token. Both requests
-- are counted, as latchbench counts them.
--
-- wrk gives a script no state per connection, only per thread: a granted
-- lease's release is queued, and the thread's next request, on whichever of
-- its connections is free first, sends the oldest queued release before any
-- new acquire. The releases still queued when the run ends are printed by
-- report.lua (unreleased PATH TOKEN), for latchbench to send.
--
-- Arguments (after wrk's --): PREFIX NAMES BODY...
--   the names are PREFIX0 .. PREFIX(NAMES-1), one at random per acquire;
--   NAMES 0: PREFIX is the one path. Each acquire sends one of the BODYs at
--   random (repeat a body to weigh it).
statuses, pending_path, pending_token = {}, {}, {}
local head, tail = 1, 0
local prefix, names, host, posts

function init(args)
	prefix, names, host = args[1], tonumber(args[2]), wrk.headers["Host"]
	posts = {}
	for a = 3, #args do
		local body = args[a]
		posts[#posts + 1] = " HTTP/1.1\r\nHost: " .. host ..
			"\r\nContent-Type: application/json\r\nContent-Length: " .. #body .. "\r\n\r\n" .. body
	end
	-- A seed of its own in every run: the leases a run left held when it
	-- stopped are not the first names the next one draws.
	math.randomseed(os.time() + 1000003 * (thread_id or 1))
end

function request()
	if head <= tail then
		local path, token = pending_path[head], pending_token[head]
		pending_path[head], pending_token[head] = nil, nil
		head = head + 1
		return "DELETE " .. path .. " HTTP/1.1\r\nHost: " .. host .. "\r\nLock-Token: " .. token .. "\r\n\r\n"
	end
	local path = prefix
	if names > 0 then
		path = prefix .. math.random(0, names - 1)
	end
	return "POST " .. path .. posts[math.random(#posts)]
end

function response(status, headers, body)
	statuses[status] = (statuses[status] or 0) + 1
	local token, location = headers["Lock-Token"], headers["Location"]
	if status == 201 and token and location then
		tail = tail + 1
		pending_path[tail], pending_token[tail] = location, token
	end
end
