-- bignum.lua: exact non-negative integers for Redis's Lua 5.1, whose only
-- number type is the IEEE double (integers exact below 2^53 only).
--
-- A bignum is a table of limbs in base 2^24, least significant first, with
-- no zero limb at the top: zero is {}. Every operation below keeps each
-- intermediate an integer below 2^53, so each is exact:
--
--   add, sub   a limb sum or difference is below 2^25;
--   mul        a column term r + x*y + carry is below 2^24 + 2^48 + 2^25;
--   small      a double that is an integer (any size) splits into limbs
--              exactly: x / 2^24 is exact, and so is x % 2^24;
--   divmod     see its comment: a float estimate never above the true
--              quotient, subtracted exactly, repeated until exact.
--
-- The values the rate-limit arithmetic needs are at most about 2^95 (a
-- count below 2^33 times a time below 2^63), four limbs.

local BASE = 16777216 -- 2^24

local function trim(a)
  local n = #a
  while n > 0 and a[n] == 0 do
    a[n] = nil
    n = n - 1
  end
  return a
end

-- small(x): the bignum of a double x that is a non-negative integer.
local function small(x)
  local a, i = {}, 1
  while x > 0 do
    local l = x % BASE
    a[i] = l
    x = (x - l) / BASE
    i = i + 1
  end
  return a
end

-- num(a): a as a double, exact when a < 2^53 and within a relative 2^-50
-- otherwise (one rounding per limb, Horner from the top).
local function num(a)
  local f = 0
  for i = #a, 1, -1 do
    f = f * BASE + a[i]
  end
  return f
end

local function cmp(a, b)
  local na, nb = #a, #b
  if na ~= nb then
    return na < nb and -1 or 1
  end
  for i = na, 1, -1 do
    local x, y = a[i], b[i]
    if x ~= y then
      return x < y and -1 or 1
    end
  end
  return 0
end

local function add(a, b)
  local r, c = {}, 0
  local n = #a
  if #b > n then n = #b end
  for i = 1, n do
    local s = (a[i] or 0) + (b[i] or 0) + c
    if s >= BASE then
      r[i], c = s - BASE, 1
    else
      r[i], c = s, 0
    end
  end
  if c > 0 then r[n + 1] = c end
  return r
end

-- sub(a, b) is a - b; a must be at least b (a Lua error otherwise: the
-- callers' invariants make it unreachable, and an error writes nothing).
local function sub(a, b)
  local r, c = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - c
    if s < 0 then
      r[i], c = s + BASE, 1
    else
      r[i], c = s, 0
    end
  end
  if c ~= 0 or #b > #a then
    error("bignum: negative difference")
  end
  return trim(r)
end

-- csub(a, b) is max(a - b, 0).
local function csub(a, b)
  if cmp(a, b) <= 0 then return {} end
  return sub(a, b)
end

local function mul(a, b)
  local na, nb = #a, #b
  if na == 0 or nb == 0 then return {} end
  local r = {}
  for i = 1, na + nb do r[i] = 0 end
  for i = 1, na do
    local x, c = a[i], 0
    for j = 1, nb do
      local t = r[i + j - 1] + x * b[j] + c
      local l = t % BASE
      r[i + j - 1] = l
      c = (t - l) / BASE
    end
    r[i + nb] = c
  end
  return trim(r)
end

-- divmod(a, b) returns floor(a/b) and a mod b; b must not be zero.
--
-- Below 2^48 the doubles' own division is exact. Otherwise:
-- Each round estimates e = floor(num(r)/num(b) * (1 - 2^-40)). num has a
-- relative error of at most 4·2^-53 on four limbs and the division and
-- product round once each, so e ≤ r/b: e·b ≤ r, and r - e·b is exact and
-- not negative. The estimate is short of r/b by at most (r/b)·2^-39 + 1,
-- so each round divides the quotient left by 2^39 until it is below 2;
-- then e may be 0, and is taken as 1, which r ≥ b admits. A quotient below
-- 2^95 takes at most four rounds.
local SHORT = 1 - 2 ^ -40

local function divmod(a, b)
  if #a <= 2 then
    -- a < 2^48: doubles are exact here. fmod is exact, a - rem is a
    -- multiple of b, and so the quotient is exact too.
    local x, y = num(a), num(b)
    local rem = math.fmod(x, y)
    return small((x - rem) / y), small(rem)
  end
  local q, r = {}, a
  local fb = num(b)
  while cmp(r, b) >= 0 do
    local e = math.floor(num(r) / fb * SHORT)
    if e < 1 then e = 1 end
    local qe = small(e)
    r = sub(r, mul(qe, b))
    q = add(q, qe)
  end
  return q, r
end

-- fromhex parses lower- or upper-case hexadecimal digits.
local function fromhex(s)
  local a, i, n = {}, 1, #s
  while n > 0 do
    local lo = n - 5
    if lo < 1 then lo = 1 end
    a[i] = tonumber(string.sub(s, lo, n), 16)
    i = i + 1
    n = lo - 1
  end
  return trim(a)
end

local function tohex(a)
  local n = #a
  if n == 0 then return "0" end
  local parts = { string.format("%x", a[n]) }
  for i = n - 1, 1, -1 do
    parts[#parts + 1] = string.format("%06x", a[i])
  end
  return table.concat(parts)
end
