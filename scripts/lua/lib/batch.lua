-- lib/batch.lua: the batch footer of the single-limit scripts.
--
-- decide_batch decides the call's requests one after the other, request i
-- on KEYS[i] with its nargs ARGV entries ARGV[nargs*(i-1)+1 .. nargs*i],
-- each under pcall, and returns four entries per request: those of decide,
-- or -1 and the error's text for a request whose key cannot be used.
local function decide_batch(decide, nargs)
  local out = {}
  for i = 1, #KEYS do
    local a = nargs * i
    local ok, allowed, remaining, reset, retry = pcall(decide, KEYS[i], unpack(ARGV, a - nargs + 1, a))
    if not ok then
      -- Redis raises a table {err = text}, the embedded store a string. One
      -- assignment each: gopher-lua (the embedded store) gets a multiple
      -- assignment that reads what it assigns wrong.
      remaining = type(allowed) == 'table' and allowed.err or tostring(allowed)
      allowed, reset, retry = -1, 0, 0
    end
    local o = 4 * i
    out[o - 3], out[o - 2], out[o - 1], out[o] = allowed, remaining, reset, retry
  end
  return out
end
