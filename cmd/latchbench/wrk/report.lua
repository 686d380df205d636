-- report.lua is appended to every script latchbench runs wrk with.
-- setup() numbers the threads (each sees its number, from 1, as the global
-- thread_id before its init()) and done() prints the run's figures for
-- latchbench to read, one "latchbench KEY VALUE..." line each:
--   requests N                        completed requests (each one counted)
--   duration_us N                     the run's length
--   errors CONNECT READ WRITE TIMEOUT socket errors and timeouts
--   status_errors N                   answers with a status above 399
--   latency_us P VALUE                for P = 50, 90, 99 and 99.9
--   status CODE N                     per thread, from a script that counts
--                                     statuses in the global table statuses
--   unreleased PATH TOKEN             per thread, the leases a cycle script
--                                     was granted and had not yet released
--                                     (globals pending_path, pending_token)
local threads = {}

function setup(thread)
	threads[#threads + 1] = thread
	thread:set("thread_id", #threads)
end

function done(summary, latency, requests)
	local e = summary.errors
	local out = {
		string.format("latchbench requests %d", summary.requests),
		string.format("latchbench duration_us %d", summary.duration),
		string.format("latchbench errors %d %d %d %d", e.connect, e.read, e.write, e.timeout),
		string.format("latchbench status_errors %d", e.status),
	}
	for _, p in ipairs({ 50, 90, 99, 99.9 }) do
		out[#out + 1] = string.format("latchbench latency_us %g %d", p, latency:percentile(p))
	end
	for _, t in ipairs(threads) do
		for code, n in pairs(t:get("statuses") or {}) do
			out[#out + 1] = string.format("latchbench status %d %d", code, n)
		end
		local tokens = t:get("pending_token") or {}
		for i, path in pairs(t:get("pending_path") or {}) do
			out[#out + 1] = string.format("latchbench unreleased %s %s", path, tokens[i])
		end
	end
	io.write(table.concat(out, "\n"), "\n")
end
