-- fast.lua: internal/algorithms' Limit.Decide, line for line as decide.lua,
-- on plain Lua numbers instead of bignums, for the limits and states where
-- every value fits below 2^53 (so every operation below is exact). After
-- bignum.lua and state.lua.
--
-- Times are relative to now (readNow's): now is 0, a state's t and restAt
-- are t - now and restAt - now. Go sends a limit down this path only when
-- (fastPath in script.go):
--
--   - its period P is below 2^49 ns (6.5 days);
--   - for the windows, P is a whole number of milliseconds or below 9·10^9
--     ns, so that now mod P is exact (sinceWindow);
--   - for sliding_window and the buckets, Capacity·P is below 2^52, so the
--     products prev·(P-e), k·P and (C-d)·R/P are exact.
--
-- And the script takes a state down this path only when its t is at most
-- 2^51 ns after now (relTime); a t more than 2^51 ns before now is
-- FAR_PAST, which every algorithm decides as a bucket at rest (as Go does:
-- such a t is before the window, or before now), and a sliding window's
-- counts n and m must have n·P and m·P below 2^52. Otherwise the charge takes
-- the bignum path, with the same answer.
--
-- A limit is {alg, r, p, cap, spanNs, spanFrac, kNs, kFrac, aNs, aFrac}; a
-- state is three numbers t, n, m. Each decide function returns the
-- decision's five numbers (code, remaining, reset, retry, delay) and the
-- next state's four (t, n, m, restAt), t nil when the state is unchanged,
-- as decide.lua's do in tables: the hot path makes no table of its own.

local FAR_PAST = -math.huge
local LIMIT51 = 2251799813685248 -- 2^51
local LIMIT52 = 4503599627370496 -- 2^52
local fmod, format, match, sub = math.fmod, string.format, string.match, string.sub

-- relTime returns the time h (hexadecimal ns) minus now: FAR_PAST when h is
-- more than 2^51 ns before now, nil when more than 2^51 ns after.
local function relTime(h)
  local n = #h
  local hi, lo
  if n > 8 then
    hi, lo = tonumber(sub(h, 1, n - 8), 16), tonumber(sub(h, n - 7), 16)
  else
    hi, lo = 0, tonumber(h, 16)
  end
  local dh = hi - nowHi
  if dh < -524288 then return FAR_PAST end -- 2^19·2^32 = 2^51
  if dh > 524288 then return nil end
  local r = dh * TWO32 + (lo - nowLo)
  if r > LIMIT51 then return nil end
  if r < -LIMIT51 then return FAR_PAST end
  return r
end

-- absParts returns now + r (at least 0, |r| ≤ 2^52) as hi·2^32 + lo.
local function absParts(r)
  local lo = nowLo + r
  local carry = math.floor(lo / TWO32)
  return nowHi + carry, lo - carry * TWO32
end

-- fastCeilMs returns now + r (r > 0) in milliseconds, rounded up.
local function fastCeilMs(r)
  local x = nowSub + r
  local rem = fmod(x, 1000000)
  local q = (x - rem) / 1000000
  if rem > 0 then q = q + 1 end
  return nowMs + q
end

-- fastState returns the state v holds relative to now (the zero State for
-- none): true and t, n, m; or false when it does not fit this path.
local function fastState(v, l)
  if not v then
    return true, FAR_PAST, 0, 0
  end
  local t, n, m = match(v, "^(%x+) (%x+) (%x+) %x+$")
  if not t then
    return true, FAR_PAST, 0, 0
  end
  local rt = relTime(t)
  if not rt then return false end
  n, m = tonumber(n, 16), tonumber(m, 16)
  if l.alg == SLIDING and math.max(n, m) * l.p >= LIMIT52 then return false end
  return true, rt, n, m
end

-- fastFormatState is formatState for a state relative to now.
local function fastFormatState(t, n, m, restAt)
  local th, tl = absParts(t)
  local rh, rl = absParts(restAt)
  if th > 0 and rh > 0 then
    return format("%x%08x %x %x %x%08x", th, tl, n, m, rh, rl)
  end
  local ts, rs = format("%x", tl), format("%x", rl)
  if th > 0 then ts = format("%x%08x", th, tl) end
  if rh > 0 then rs = format("%x%08x", rh, rl) end
  return ts .. format(" %x %x ", n, m) .. rs
end

local function fastFormatDecision(code, rem, reset, retry, delay)
  return format("%d %x %x %x %x", code, rem, reset, retry, delay)
end

-- fastPut is state.lua's put for a restAt relative to now.
local function fastPut(key, v, restAt, expire)
  if not expire then
    redis.call("SET", key, v)
  elseif restAt <= 0 then
    redis.call("DEL", key)
  else
    redis.call("SET", key, v, "PXAT", format("%.0f", fastCeilMs(restAt)))
  end
end

-- quo returns floor(x/p) for 0 ≤ x < 2^53: fmod is exact, x - rem a
-- multiple of p, and so the quotient exact.
local function quo(x, p)
  return (x - fmod(x, p)) / p
end

-- sinceWindow returns now mod P (now - windowStart).
local function sinceWindow(p)
  if fmod(p, 1000000) == 0 then
    return fmod(nowMs, p / 1000000) * 1000000 + nowSub
  end
  return fmod(fmod(nowMs, p) * 1000000 + nowSub, p)
end

-- fastFixedWindow mirrors Limit.fixedWindow.
local function fastFixedWindow(l, t, n, cost)
  local cap = l.cap
  local start = -sinceWindow(l.p)
  local count = n
  if start > t then
    count = 0
  else
    start = t
  end
  local stop = start + l.p

  local reset = 0
  if count > 0 then
    reset = stop
  end
  if cost <= 0 or cost > cap then
    if cost > 0 then return OVER, math.max(cap - count, 0), reset, 0, 0 end
    return ALLOWED, math.max(cap - count, 0), reset, 0, 0
  end
  if count + cost > cap then
    return DENIED, math.max(cap - count, 0), reset, stop, 0
  end
  count = count + cost
  return ALLOWED, cap - count, stop, 0, 0, start, count, 0, stop
end

-- fastSlidingRemaining mirrors Limit.slidingRemaining; w = prev·(P-e).
local function fastSlidingRemaining(l, cur, prev, e, w)
  local weight = prev
  if e > 0 and prev > 0 then
    local rem = fmod(w, l.p)
    weight = (w - rem) / l.p
    if rem > 0 then weight = weight + 1 end
  end
  return math.max(l.cap - cur - weight, 0)
end

-- fastSlidingRetry mirrors Limit.slidingRetry.
local function fastSlidingRetry(l, start, cur, prev, k, cost)
  local p = l.p
  if k >= 0 and prev > 0 then
    local q = quo(k * p, prev)
    if q > 0 then
      return start + p - q
    end
  end
  local e2 = 0
  local room = l.cap - cost
  if cur > room then
    e2 = p - quo(room * p, cur)
  end
  return start + p + e2
end

-- fastSlidingWindow mirrors Limit.slidingWindow.
local function fastSlidingWindow(l, t, n, m, cost)
  local p = l.p
  local start = -sinceWindow(p)
  local cur, prev = n, m
  local e
  if start <= t then
    start = t
    e = math.max(-start, 0)
  elseif start - t < p + p then
    prev, cur = cur, 0
    e = -start
  else
    prev, cur = 0, 0
    e = -start
  end

  local w = prev * (p - e)

  local reset = 0
  if cur > 0 then
    reset = math.max(start + p + p, 0)
  elseif prev > 0 then
    reset = math.max(start + p, 0)
  end
  if cost <= 0 or cost > l.cap then
    local code = ALLOWED
    if cost > 0 then code = OVER end
    return code, fastSlidingRemaining(l, cur, prev, e, w), reset, 0, 0
  end

  local k = l.cap - cur - cost
  local kP = 0
  if k > 0 then kP = k * p end
  if k < 0 or w > kP then
    return DENIED, fastSlidingRemaining(l, cur, prev, e, w), reset,
      math.max(fastSlidingRetry(l, start, cur, prev, k, cost), 0), 0
  end
  cur = cur + cost
  local restAt = start + p + p
  return ALLOWED, fastSlidingRemaining(l, cur, prev, e, w), math.max(restAt, 0), 0, 0, start, cur, prev, restAt
end

-- fastCeilNs mirrors ceilNs (no saturation: every value is below 2^53).
local function fastCeilNs(ns, frac)
  if frac > 0 then return ns + 1 end
  return ns
end

-- fastGcraRemaining mirrors Limit.gcraRemaining: (C-d)·R ≤ Capacity·P <
-- 2^52.
local function fastGcraRemaining(l, dNs, dFrac)
  local ns, frac = l.spanNs - dNs, l.spanFrac - dFrac
  if frac < 0 then
    ns, frac = ns - 1, frac + l.r
  end
  if ns < 0 then
    return 0
  end
  return quo(ns * l.r + frac, l.p)
end

-- fastGcra mirrors Limit.gcra.
local function fastGcra(l, t, n, cost)
  local r = l.r
  local frac = n
  if frac >= r then frac = r - 1 end
  local dNs, dFrac = 0, 0
  if t >= 0 then
    dNs, dFrac = t, frac
  end

  if cost <= 0 or cost > l.cap then
    local code = ALLOWED
    if cost > 0 then code = OVER end
    return code, fastGcraRemaining(l, dNs, dFrac), fastCeilNs(dNs, dFrac), 0, 0
  end

  local aNs, aFrac = l.aNs, l.aFrac
  if dNs > aNs or dNs == aNs and dFrac > aFrac then
    local wNs, wFrac = dNs - aNs, dFrac - aFrac
    if wFrac < 0 then
      wNs, wFrac = wNs - 1, wFrac + r
    end
    return DENIED, fastGcraRemaining(l, dNs, dFrac), fastCeilNs(dNs, dFrac), fastCeilNs(wNs, wFrac), 0
  end

  local delay = 0
  if l.alg == QUEUE then
    delay = fastCeilNs(dNs, dFrac)
  end
  dNs, dFrac = dNs + l.kNs, dFrac + l.kFrac
  if dFrac >= r then
    dNs, dFrac = dNs + 1, dFrac - r
  end
  local reset = fastCeilNs(dNs, dFrac)
  return ALLOWED, fastGcraRemaining(l, dNs, dFrac), reset, 0, delay, dNs, dFrac, 0, reset
end

-- fastDecide mirrors Limit.Decide.
local function fastDecide(l, t, n, m, cost)
  local alg = l.alg
  if alg == FIXED then
    return fastFixedWindow(l, t, n, cost)
  elseif alg == SLIDING then
    return fastSlidingWindow(l, t, n, m, cost)
  end
  return fastGcra(l, t, n, cost)
end
