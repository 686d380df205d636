-- lib/muldiv.lua: exact integer arithmetic on Lua numbers (doubles).

-- divmod returns floor(n / d) and n mod d for integers 0 <= n and
-- 1 <= d with n + d <= 2^53: the rounded quotient is corrected.
local function divmod(n, d)
  local q = math.floor(n / d)
  local r = n - q * d
  if r < 0 then return q - 1, r + d end
  if r >= d then return q + 1, r - d end
  return q, r
end

-- muldiv returns floor((x * y + a) / z) and the remainder, exactly, for
-- integers x, y, a >= 0 with a < 2^52 and 1 <= z < 2^50 (the bounds on limit
-- and window keep z there) whose quotient is below 2^53. Past 2^52 it
-- multiplies by the digits of x in base b, a power of two with b * z < 2^51,
-- one at a time: every partial sum stays below 2^52.
local function muldiv(x, y, a, z)
  local n = x * y + a
  if n < 4503599627370496 then return divmod(n, z) end
  local yq, yr = divmod(y, z) -- x * y = x * yq * z + x * yr
  local q0 = x * yq
  local _, e = math.frexp(z) -- z < 2^e
  local b = math.ldexp(1, 51 - e)
  local p = 1
  while p * b <= x do p = p * b end
  local q, r = 0, 0 -- x's digits so far, times yr, are q * z + r
  while p >= 1 do
    local digit = math.floor(x / p)
    x = x - digit * p
    local tq, tr = divmod(r * b + digit * yr, z)
    q = q * b + tq
    r = tr
    p = p / b
  end
  local aq, ar = divmod(r + a, z)
  return q0 + q + aq, ar
end
