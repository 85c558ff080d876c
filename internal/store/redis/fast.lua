-- fast.lua: internal/core/algorithms' arithmetic, function for function as
-- decide.lua, on plain Lua numbers instead of bignums, for the limits and
-- states where every value fits below 2^53 (so every operation below is
-- exact). After bignum.lua and state.lua.
--
-- Each section is headed by the Go file it mirrors (fixedwindow.go,
-- slidingwindow.go, gcra.go, concurrency.go, decision.go and kind.go), as decide.lua's
-- are, and each function names the Go function it mirrors: read them side
-- by side.
--
-- Times are relative to now (readNow's): now is 0, a state's t and restAt
-- are t - now and restAt - now. Go sends a limit down this path only when
-- (fastPath in script.go):
--
--   - its period P is below 2^49 ns (6.5 days);
--   - for the windows, P is a whole number of milliseconds or below 9·10^9
--     ns, so that now mod P is exact (sinceWindow);
--   - for sliding_window and the buckets, Capacity·P is below 2^52, so the
--     products prev·(P-e), k·P and (C-d)·R/P are exact;
--   - for the buckets, R ≤ P, so that a debt (d-C)·R/P is below 2^52.
--   - a concurrency always (its lease is at most MaxLease, below 2^49 ns;
--     see its section).
--
-- And the script takes a state down this path only when its t is at most
-- 2^51 ns after now (relTime); a t more than 2^51 ns before now is
-- FAR_PAST, which every algorithm decides as a bucket at rest (as Go does:
-- such a t is before the window, or before now), and a sliding window's
-- counts n and m must have n·P and m·P below 2^52. Otherwise the charge takes
-- the bignum path, with the same answer.
--
-- A limit is {alg, r, p, cap, spanNs, spanFrac, kNs, kFrac, aNs, aFrac} (and since,
-- sinceWindow's, once computed: a limit lives for one script call); a
-- state is three numbers t, n, m. Each decide function returns the
-- decision's five numbers (code, remaining, reset, retry, delay; remaining
-- is minus the decision's Debt when the bucket owes, as settle.lua
-- replies it) and the
-- next state's four (t, n, m, restAt), t nil when the state is unchanged,
-- as decide.lua's do in tables: the hot path makes no table of its own.
--
-- Checks, overdraft and refunds (each algorithm's usage operations) return
-- the same, with t false for a bucket brought back to rest: the zero
-- State, whose key is deleted. The limit of a check, an overdraft or a
-- refund carries a1Ns, a1Frac (C - I: the most backlog that admits a cost
-- of 1), and of an overdraft or a refund kNs, kFrac for its whole cost or
-- units; Go sends an overdraft or refund whose k reaches 2^50 ns down the
-- bignum path, so d + k stays below 2^52 here, far below the bound on debt
-- (MaxSpan), which this path never meets. Each algorithm's are built, like
-- the bignums library, by a function of its section (fastFixedUsage,
-- fastSlidingUsage, fastGcraUsage) the first time a script call meets a
-- check, an overdraft charge or a refund of that algorithm: a script's body
-- runs whole on every call, and creating these functions would cost every
-- ordinary charge.

local FAR_PAST = -math.huge
local LIMIT48 = 281474976710656 -- 2^48
local LIMIT51 = 2251799813685248 -- 2^51
local LIMIT52 = 4503599627370496 -- 2^52
local fmod, format, ssub = math.fmod, string.format, string.sub

-- =========================================================================
-- The state and now on plain numbers: reading, writing, window starts
-- =========================================================================

-- relTime returns the time ms·10^6 + sub minus now: FAR_PAST when it is
-- more than 2^51 ns before now, nil when more than 2^51 ns after. (|dms|
-- below 2.3·10^9 keeps every term below 2^53.)
local function relTime(ms, sub)
  local dms = ms - nowMs
  if dms < -2300000000 then return FAR_PAST end
  if dms > 2300000000 then return nil end
  local r = dms * 1000000 + (sub - nowSub)
  if r > LIMIT51 then return nil end
  if r < -LIMIT51 then return FAR_PAST end
  return r
end

-- absMs returns now + r (at least 0, |r| ≤ 2^52) as whole milliseconds
-- and the nanoseconds beyond them: fmod is exact, x - rem a multiple of
-- 10^6, and so the quotient exact.
local function absMs(r)
  local x = nowSub + r
  local rem = fmod(x, 1000000)
  if rem < 0 then rem = rem + 1000000 end
  return nowMs + (x - rem) / 1000000, rem
end

-- absT and absRest are absMs for a state's t and restAt, each remembering
-- its last answer: a window's charges in one call share both.
local function rememberingAbsMs()
  local lastR, lastMs, lastSub
  return function(r)
    if r ~= lastR then
      lastR, lastMs, lastSub = r, absMs(r)
    end
    return lastMs, lastSub
  end
end
local absT, absRest = rememberingAbsMs(), rememberingAbsMs()

-- expiryMs returns the millisecond a state whose restAt is rMs·10^6 + rSub
-- expires at (before linger):
-- restAt rounded up to the millisecond, never sooner (as state.lua's
-- ceilMs).
local function expiryMs(rMs, rSub)
  if rSub > 0 then return rMs + 1 end
  return rMs
end

-- fastState returns the state v holds relative to now (the zero State for
-- none, or for a value that is not a state): true and t, n, m and the
-- millisecond its key expires at, linger aside (expiryMs of its restAt: a
-- key found holds a state written with that expiry), nil for none, and x
-- (a concurrency's fourth number, 0 for the others); or false when it does
-- not fit this path.
local function fastState(v, l)
  local ok, tMs, tSub, n, m, rMs, rSub = unpackState(v)
  if not ok then
    return true, FAR_PAST, 0, 0, nil, 0
  end
  if l.alg == CONC then
    -- A concurrency's state (see concurrency.go's section): restAt
    -- relative to now, its counts lo, n and m, its key's expiry. A restAt
    -- more than 2^51 ns after now (a clock that went back over 26 days)
    -- is taken as 2^51 ns after: every count stays live.
    if tSub ~= 0 or tMs < 0 or tMs >= LIMIT48 then
      return true, FAR_PAST, 0, 0, nil, 0
    end
    return true, relTime(rMs, rSub) or LIMIT51, tMs, n, expiryMs(rMs, rSub), m
  end
  local rt = relTime(tMs, tSub)
  if not rt then return false end
  if l.alg == SLIDING and math.max(n, m) * l.p >= LIMIT52 then return false end
  -- A bucket's state written at another rate (m, its Requests) is
  -- converted on the bignum path (decide.lua's changed).
  if l.alg >= TOKEN and m ~= 0 and m ~= l.r then return false end
  return true, rt, n, m, expiryMs(rMs, rSub)
end

-- expiries are the expiry arguments formatted in this call, by their
-- value: a window's charges all expire at its end.
local expiries = {}

-- fastPut is state.lua's formatState and put for a state relative to now,
-- over a key whose expiry is kept (fastState's, nil for a key absent), conc
-- true for a concurrency's (whose t is its counts, written as they are); it
-- returns the value written. t false is the zero State: the key is
-- deleted. When the new state's expiry is the one the
-- key has (every charge of a window but its first), the value is
-- overwritten in place (SETRANGE, same 41 bytes, expiry untouched): the
-- same value and expiry as SET ... PXAT, without a new string or a change
-- to Redis's expiry table (measured about 0.3 µs less per charge).
local function fastPut(key, t, n, m, restAt, kept, conc)
  if t == false then
    -- The zero State (a refund brought the bucket back to rest).
    redis.call("DEL", key)
    return ""
  end
  local tMs, tSub = t, 0 -- a concurrency's counts, not a time
  if not conc then
    tMs, tSub = absT(t)
  end
  local rMs, rSub = absRest(restAt)
  local v = packState(tMs, tSub, n, m, rMs, rSub)
  local ms = expiryMs(rMs, rSub)
  local at = keyExpiry(ms, restAt <= 0)
  if not at then
    redis.call("DEL", key)
  elseif ms == kept then
    redis.call("SETRANGE", key, "0", v) -- "0": Redis formats a Lua number with printf
  else
    local arg = expiries[at]
    if not arg then
      arg = format("%.0f", at)
      expiries[at] = arg
    end
    redis.call("SET", key, v, expiry, arg)
  end
  return v
end

-- quo returns floor(x/p) for 0 ≤ x < 2^53: fmod is exact, x - rem a
-- multiple of p, and so the quotient exact.
local function quo(x, p)
  return (x - fmod(x, p)) / p
end

-- sinceWindow returns now mod P (now - windowStart) for the limit l,
-- computed once per script call (now is the call's) and kept in l.
local function sinceWindow(l)
  local since = l.since
  if since then return since end
  local p = l.p
  if fmod(p, 1000000) == 0 then
    since = fmod(nowMs, p / 1000000) * 1000000 + nowSub
  else
    since = fmod(fmod(nowMs, p) * 1000000 + nowSub, p)
  end
  l.since = since
  return since
end

-- =========================================================================
-- fixedwindow.go: FixedWindow
-- =========================================================================

-- fastFixedWindow mirrors Limit.fixedWindow.
local function fastFixedWindow(l, t, n, cost)
  local cap = l.cap
  local start = -sinceWindow(l)
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
    if cost > 0 then return OVER, cap - count, reset, 0, 0 end
    return ALLOWED, cap - count, reset, 0, 0
  end
  if count + cost > cap then
    return DENIED, cap - count, reset, stop, 0
  end
  count = count + cost
  return ALLOWED, cap - count, stop, 0, 0, start, count, 0, stop
end

-- fastFixedUsage returns the function that decides a check, an overdraft or a
-- refund (l.kind) on a fixed window: the FixedWindow case of Limit.Check,
-- Overdraft and Refund (decision.go).
local fixedUsageLib
local function fastFixedUsage()
if fixedUsageLib then return fixedUsageLib end

-- fastFixedAt mirrors Limit.fixedAt.
local function fastFixedAt(l, t, n)
  local start = -sinceWindow(l)
  if start > t then
    return start, 0
  end
  return t, n
end

-- fastFixedReport mirrors Limit.fixedReport: code, remaining, reset,
-- retry.
local function fastFixedReport(l, start, count, extra)
  local rem, reset = l.cap - count, 0
  if count > 0 then
    reset = start + l.p
  end
  if count + extra > l.cap then
    return DENIED, rem, reset, reset
  end
  return ALLOWED, rem, reset, 0
end

-- fastFixedOverdraft mirrors Limit.fixedOverdraft.
local function fastFixedOverdraft(l, t, n, cost)
  local start, count = fastFixedAt(l, t, n)
  if cost <= 0 then
    local code, rem, reset, retry = fastFixedReport(l, start, count, 0)
    return code, rem, reset, retry, 0
  end
  count = math.min(count + cost, MAXCOUNT)
  local code, rem, reset, retry = fastFixedReport(l, start, count, 0)
  return code, rem, reset, retry, 0, start, count, 0, start + l.p
end

-- fastFixedRefund mirrors Limit.fixedRefund, and Limit.fixedRefundAt when
-- the refund names its charge time (l.charged, relative to now).
local function fastFixedRefund(l, t, n, units)
  local charged = l.charged
  if charged and charged < -sinceWindow(l) and -sinceWindow(l) >= t then
    units = 0 -- an earlier window's: its count has passed
  end
  local start, count = fastFixedAt(l, t, n)
  if units <= 0 or count <= 0 then
    local _, rem, reset = fastFixedReport(l, start, count, 0)
    return ALLOWED, rem, reset, 0, 0
  end
  count = math.max(count - units, 0)
  local _, rem, reset = fastFixedReport(l, start, count, 0)
  if count == 0 then
    return ALLOWED, rem, reset, 0, 0, false
  end
  return ALLOWED, rem, reset, 0, 0, start, count, 0, start + l.p
end

fixedUsageLib = function(l, t, n)
  local kind = l.kind
  if kind == CHECK then
    local start, count = fastFixedAt(l, t, n)
    local code, rem, reset, retry = fastFixedReport(l, start, count, 1)
    return code, rem, reset, retry, 0
  elseif kind == OVERDRAFT then
    return fastFixedOverdraft(l, t, n, l.cost)
  end
  return fastFixedRefund(l, t, n, l.cost)
end
return fixedUsageLib
end

-- =========================================================================
-- slidingwindow.go: SlidingWindow
-- =========================================================================

-- fastSlidingRemaining mirrors Limit.slidingLeft (the Remaining, or minus
-- the Debt); w = prev·(P-e).
local function fastSlidingRemaining(l, cur, prev, e, w)
  local weight = prev
  if e > 0 and prev > 0 then
    local rem = fmod(w, l.p)
    weight = (w - rem) / l.p
    if rem > 0 then weight = weight + 1 end
  end
  return l.cap - cur - weight
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
  local start = -sinceWindow(l)
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

-- fastSlidingUsage returns the function that decides a check, an overdraft or a
-- refund (l.kind) on a sliding window: the SlidingWindow case of
-- Limit.Check, Overdraft and Refund (decision.go).
local slidingUsageLib
local function fastSlidingUsage()
if slidingUsageLib then return slidingUsageLib end

-- fastSlidingAt mirrors Limit.slidingAt: start, cur, prev, e.
local function fastSlidingAt(l, t, n, m)
  local p = l.p
  local start = -sinceWindow(l)
  if start <= t then
    return t, n, m, math.max(-t, 0)
  elseif start - t < p + p then
    return start, 0, n, -start
  end
  return start, 0, 0, -start
end

-- fastSlidingReport mirrors Limit.slidingReport: code, remaining, reset,
-- retry.
local function fastSlidingReport(l, start, cur, prev, e, extra)
  local p = l.p
  local w = prev * (p - e)
  local rem, reset = fastSlidingRemaining(l, cur, prev, e, w), 0
  if cur > 0 then
    reset = math.max(start + p + p, 0)
  elseif prev > 0 then
    reset = math.max(start + p, 0)
  end
  local k = l.cap - cur - extra
  local kP = 0
  if k > 0 then kP = k * p end
  if k < 0 or w > kP then
    return DENIED, rem, reset, math.max(fastSlidingRetry(l, start, cur, prev, l.cap - cur - 1, 1), 0)
  end
  return ALLOWED, rem, reset, 0
end

-- fastSlidingState mirrors Limit.slidingState: t, n, m, restAt, or false.
local function fastSlidingState(l, start, cur, prev)
  if cur > 0 then
    return start, cur, prev, start + l.p + l.p
  elseif prev > 0 then
    return start, 0, prev, start + l.p
  end
  return false
end

-- fastSlidingOverdraft mirrors Limit.slidingOverdraft.
local function fastSlidingOverdraft(l, t, n, m, cost)
  local start, cur, prev, e = fastSlidingAt(l, t, n, m)
  if cost <= 0 then
    local code, rem, reset, retry = fastSlidingReport(l, start, cur, prev, e, 0)
    return code, rem, reset, retry, 0
  end
  cur = math.min(cur + cost, MAXCOUNT)
  local code, rem, reset, retry = fastSlidingReport(l, start, cur, prev, e, 0)
  local nt, nn, nm, nr = fastSlidingState(l, start, cur, prev)
  return code, rem, reset, retry, 0, nt, nn, nm, nr
end

-- fastSlidingRefund mirrors Limit.slidingRefund.
local function fastSlidingRefund(l, t, n, m, units)
  local start, cur, prev, e = fastSlidingAt(l, t, n, m)
  if units <= 0 or cur + prev <= 0 then
    local _, rem, reset = fastSlidingReport(l, start, cur, prev, e, 0)
    return ALLOWED, rem, reset, 0, 0
  end
  local back = math.min(units, cur)
  cur = cur - back
  prev = math.max(prev - (units - back), 0)
  local _, rem, reset = fastSlidingReport(l, start, cur, prev, e, 0)
  local nt, nn, nm, nr = fastSlidingState(l, start, cur, prev)
  return ALLOWED, rem, reset, 0, 0, nt, nn, nm, nr
end

-- fastSlidingRefundAt mirrors Limit.slidingRefundAt, for a refund charged
-- at l.charged (relative to now).
local function fastSlidingRefundAt(l, t, n, m, units)
  local start, cur, prev, e = fastSlidingAt(l, t, n, m)
  if start > 0 then
    return fastSlidingRefund(l, t, n, m, units)
  end
  -- start is now's window's start: the charge's window is start's when
  -- it is not before it, the previous one's when within P before it.
  local charged, changed = l.charged, false
  if units > 0 then
    if charged >= start and cur > 0 then
      cur, changed = math.max(cur - units, 0), true
    elseif charged < start and charged >= start - l.p and prev > 0 then
      prev, changed = math.max(prev - units, 0), true
    end
  end
  local _, rem, reset = fastSlidingReport(l, start, cur, prev, e, 0)
  if not changed then
    return ALLOWED, rem, reset, 0, 0
  end
  local nt, nn, nm, nr = fastSlidingState(l, start, cur, prev)
  return ALLOWED, rem, reset, 0, 0, nt, nn, nm, nr
end

slidingUsageLib = function(l, t, n, m)
  local kind = l.kind
  if kind == CHECK then
    local start, cur, prev, e = fastSlidingAt(l, t, n, m)
    local code, rem, reset, retry = fastSlidingReport(l, start, cur, prev, e, 1)
    return code, rem, reset, retry, 0
  elseif kind == OVERDRAFT then
    return fastSlidingOverdraft(l, t, n, m, l.cost)
  elseif l.charged then
    return fastSlidingRefundAt(l, t, n, m, l.cost)
  end
  return fastSlidingRefund(l, t, n, m, l.cost)
end
return slidingUsageLib
end

-- =========================================================================
-- gcra.go: TokenBucket, LeakyBucket, LeakyBucketQueue
-- =========================================================================

-- fastCeilNs mirrors ceilNs (no saturation: every value is below 2^53).
local function fastCeilNs(ns, frac)
  if frac > 0 then return ns + 1 end
  return ns
end

-- fastGcraRemaining mirrors Limit.gcraRemaining, (C-d)·R ≤ Capacity·P <
-- 2^52, and when d > C minus Limit.gcraDebt: ceil((d-C)·R/P), below 2^52
-- as d is and R ≤ P on this path, its product taken on bignums when it
-- may not be exact (at 2^52 or more).
local function fastGcraRemaining(l, dNs, dFrac)
  local ns, frac = l.spanNs - dNs, l.spanFrac - dFrac
  if frac < 0 then
    ns, frac = ns - 1, frac + l.r
  end
  if ns >= 0 then
    return quo(ns * l.r + frac, l.p)
  end
  -- d - C = xNs + xFrac/R.
  local xNs, xFrac = -ns, 0
  if frac > 0 then
    xNs, xFrac = xNs - 1, l.r - frac
  end
  local q
  if xNs * l.r < LIMIT52 then
    local x = xNs * l.r + xFrac
    q = quo(x, l.p)
    if q * l.p < x then q = q + 1 end
  else
    local B = bignums()
    local big, rem = B.divmod(B.add(B.mul(B.small(xNs), B.small(l.r)), B.small(xFrac)), B.small(l.p))
    q = B.num(big)
    if #rem > 0 then q = q + 1 end
  end
  return -q
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
  return ALLOWED, fastGcraRemaining(l, dNs, dFrac), reset, 0, delay, dNs, dFrac, r, reset
end

-- fastGcraUsage returns the function that decides a check, an overdraft or a
-- refund (l.kind) on a bucket: the buckets' case of Limit.Check,
-- Overdraft and Refund (decision.go; Check's gcraCheck is gcraReport for
-- a cost of 1).
local gcraUsageLib
local function fastGcraUsage()
if gcraUsageLib then return gcraUsageLib end

-- fastBacklog mirrors Limit.backlog (t is at most 2^51 ns here).
local function fastBacklog(l, t, n)
  if t < 0 then
    return 0, 0
  end
  local frac = n
  if frac >= l.r then frac = l.r - 1 end
  return t, frac
end

-- fastGcraReport mirrors Limit.gcraReport: code, remaining, reset, retry.
local function fastGcraReport(l, dNs, dFrac, extra)
  local rem, reset = fastGcraRemaining(l, dNs, dFrac), fastCeilNs(dNs, dFrac)
  local limNs, limFrac = l.spanNs, l.spanFrac
  if extra > 0 then
    limNs, limFrac = l.a1Ns, l.a1Frac
  end
  if dNs > limNs or dNs == limNs and dFrac > limFrac then
    local wNs, wFrac = dNs - l.a1Ns, dFrac - l.a1Frac
    if wFrac < 0 then
      wNs, wFrac = wNs - 1, wFrac + l.r
    end
    return DENIED, rem, reset, fastCeilNs(wNs, wFrac)
  end
  return ALLOWED, rem, reset, 0
end

-- fastGcraState mirrors Limit.gcraState: t, n, m, restAt, or false at
-- rest.
local function fastGcraState(l, dNs, dFrac)
  if dNs == 0 and dFrac == 0 then
    return false
  end
  return dNs, dFrac, l.r, fastCeilNs(dNs, dFrac)
end

-- fastGcraOverdraft mirrors Limit.gcraOverdraft.
local function fastGcraOverdraft(l, t, n, cost)
  if cost > 0 and cost <= l.cap then
    local code, rem, reset, retry, delay, nt, nn, nm, nr = fastGcra(l, t, n, cost)
    if code == ALLOWED then
      return code, rem, reset, retry, delay, nt, nn, nm, nr
    end
  end
  local dNs, dFrac = fastBacklog(l, t, n)
  if cost <= 0 then
    local code, rem, reset, retry = fastGcraReport(l, dNs, dFrac, 0)
    return code, rem, reset, retry, 0
  end
  dNs, dFrac = dNs + l.kNs, dFrac + l.kFrac
  if dFrac >= l.r then
    dNs, dFrac = dNs + 1, dFrac - l.r
  end
  local code, rem, reset, retry = fastGcraReport(l, dNs, dFrac, 0)
  local nt, nn, nm, nr = fastGcraState(l, dNs, dFrac)
  return code, rem, reset, retry, 0, nt, nn, nm, nr
end

-- fastGcraRefund mirrors Limit.gcraRefundSpan: it takes kNs + kFrac/R
-- off the backlog, never below zero.
local function fastGcraRefund(l, t, n, kNs, kFrac)
  local dNs, dFrac = fastBacklog(l, t, n)
  if (kNs > 0 or kFrac > 0) and (dNs > 0 or dFrac > 0) then
    dNs, dFrac = dNs - kNs, dFrac - kFrac
    if dFrac < 0 then
      dNs, dFrac = dNs - 1, dFrac + l.r
    end
    if dNs < 0 then
      dNs, dFrac = 0, 0
    end
    local _, rem, reset = fastGcraReport(l, dNs, dFrac, 0)
    local nt, nn, nm, nr = fastGcraState(l, dNs, dFrac)
    return ALLOWED, rem, reset, 0, 0, nt, nn, nm, nr
  end
  local _, rem, reset = fastGcraReport(l, dNs, dFrac, 0)
  return ALLOWED, rem, reset, 0, 0
end

gcraUsageLib = function(l, t, n)
  local kind = l.kind
  if kind == CHECK then
    local dNs, dFrac = fastBacklog(l, t, n)
    local code, rem, reset, retry = fastGcraReport(l, dNs, dFrac, 1)
    return code, rem, reset, retry, 0
  elseif kind == OVERDRAFT then
    return fastGcraOverdraft(l, t, n, l.cost)
  elseif l.cost <= 0 then
    return fastGcraRefund(l, t, n, 0, 0) -- Limit.gcraRefund of no units
  end
  local kNs, kFrac = l.kNs, l.kFrac
  if l.charged then
    -- Limit.RefundAt: the part of the charge's backlog that has not
    -- drained since it was charged.
    kNs = kNs + l.charged
    if kNs < 0 then kNs, kFrac = 0, 0 end
  end
  return fastGcraRefund(l, t, n, kNs, kFrac)
end
return gcraUsageLib
end

-- =========================================================================
-- concurrency.go: Concurrency
-- =========================================================================

-- A concurrency's state on this path is four numbers: t its restAt
-- relative to now, n its three newest counts (Go's t without its sign bit:
-- c0 + c1·2^16 + c2·2^32, below 2^48), m and x its four oldest (Go's n and
-- m: c3 + c4·2^16, c5 + c6·2^16). It is stored in STATE with n in t's
-- milliseconds (and 0 nanoseconds) and m, x as n, m; restAt as every
-- state's, so the key expires when its last unit does. Every value here is
-- exact on plain numbers without a bound on the state: counts are at most
-- MaxInFlight, a lease T (a period) below 2^49 ns as for every limit on
-- this path (fastPath in script.go, which takes every concurrency of such
-- a lease down this path: decide.lua does not decide concurrency), so G,
-- restAt - now ≤ T + G and their sums stay below 2^51.

local TWO16, TWO32 = 65536, 4294967296
local floor = math.floor

-- cg holds the counts being worked on, cg[i+1] Go's g[i] (newest first):
-- reused, so that no charge makes a table.
local cg = {}

-- concGen returns G = ceil(T/(Generations-1)) and now mod G, computed
-- once per script call and kept in l. For G not a whole number of
-- milliseconds, (nowMs mod G)·10^6 is taken a factor of 10 at a time, each
-- product below 10·G < 2^51.
local function concGen(l)
  local g = l.g
  if g then return g, l.since end
  local p = l.p
  g = (p + 5 - fmod(p + 5, 6)) / 6
  local since
  if fmod(g, 1000000) == 0 then
    since = fmod(nowMs, g / 1000000) * 1000000 + nowSub
  else
    since = fmod(nowMs, g)
    for _ = 1, 6 do
      since = fmod(since * 10, g)
    end
    since = fmod(since + nowSub, g)
  end
  l.g, l.since = g, since
  return g, since
end

-- concUnpack mirrors unpackGens: cg from n, m, x.
local function concUnpack(n, m, x)
  local c0 = fmod(n, TWO16)
  local hi = (n - c0) / TWO16
  local c1 = fmod(hi, TWO16)
  cg[1], cg[2], cg[3] = c0, c1, (hi - c1) / TWO16
  local c3, c5 = fmod(m, TWO16), fmod(x, TWO16)
  cg[4], cg[5], cg[6], cg[7] = c3, (m - c3) / TWO16, c5, (x - c5) / TWO16
end

-- concLane returns g[i] (0 past the oldest).
local function concLane(i)
  if i < 7 then return cg[i + 1] end
  return 0
end

-- concPack returns n, m, x of the counts g[i], g[i+1], …: leaseState's
-- packing.
local function concPack(i)
  return concLane(i) + concLane(i + 1) * TWO16 + concLane(i + 2) * TWO32,
    concLane(i + 3) + concLane(i + 4) * TWO16, concLane(i + 5) + concLane(i + 6) * TWO16
end

-- concSum returns the units in flight, the sum of cg (gens' inFlight).
local function concSum()
  return cg[1] + cg[2] + cg[3] + cg[4] + cg[5] + cg[6] + cg[7]
end

-- concAt mirrors Limit.leaseAt: it sets cg and returns end.
local function concAt(l, t, n, m, x)
  local g, since = concGen(l)
  local p = l.p
  if t <= 0 then
    for i = 1, 7 do cg[i] = 0 end
    return g - since - 1 + p
  end
  concUnpack(n, m, x)
  local e, nxt, shift = t, t - p + 1, 0
  while nxt <= 0 do
    shift = shift + 1
    if shift == 7 then
      for i = 1, 7 do cg[i] = 0 end
      return g - since - 1 + p
    end
    e, nxt = e + g, nxt + g
  end
  if shift > 0 then
    for i = 7, shift + 1, -1 do cg[i] = cg[i - shift] end
    for i = 1, shift do cg[i] = 0 end
  end
  local stop = e - 6 * g
  for i = 7, 2, -1 do
    if stop > 0 then break end
    cg[i] = 0
    stop = stop + g
  end
  return e
end

-- concState mirrors Limit.leaseState: the state as fastPut writes a
-- concurrency's (n, m, x and restAt), or false for the zero State.
local function concState(l, e)
  local i = 0
  while i < 7 and cg[i + 1] == 0 do
    i = i + 1
  end
  if i == 7 then
    return false
  end
  local n, m, x = concPack(i)
  return n, m, x, e - i * l.g
end

-- concReport mirrors Limit.leaseReport: code, remaining, reset, retry.
local function concReport(l, inf, e, extra)
  local cap, g = l.cap, l.g
  local rem, reset = cap - inf, 0
  if inf > 0 then
    local i = 0
    while cg[i + 1] == 0 do
      i = i + 1
    end
    reset = e - i * g
  end
  if inf + extra > cap then
    -- leaseRetry.
    local excess, retry = inf + math.max(extra, 1) - cap, e
    for i = 6, 1, -1 do
      excess = excess - cg[i + 1]
      if excess <= 0 then
        retry = e - i * g
        break
      end
    end
    return DENIED, rem, reset, retry
  end
  return ALLOWED, rem, reset, 0
end

-- fastConcurrency mirrors Limit.concurrency, on the state t (restAt), n,
-- m, x as fastState reads it; its next state is n, m, x and restAt, as
-- fastPut writes a concurrency's.
local function fastConcurrency(l, t, n, m, x, cost)
  local cap = l.cap
  local g = l.g or concGen(l)
  if cost > 0 and cost <= cap and t - 6 * g > 0 and t - l.p + 1 > 0 then
    -- The most common charge: nothing has expired at now, which lies in
    -- the newest generation. The sum of a number's 16-bit counts c0 +
    -- c1·2^16 + c2·2^32 is that number less 65535·(⌊v/2^16⌋ + ⌊v/2^32⌋)
    -- (divisions by powers of 2 are exact): no count is unpacked.
    local inf = n + m + x - 65535 * (floor(n / TWO16) + floor(n / TWO32) + floor(m / TWO16) + floor(x / TWO16))
    if inf + cost <= cap then
      return ALLOWED, cap - inf - cost, t, 0, 0, n + cost, m, x, t
    end
  end
  if cost > 0 and cost <= cap and t > 0 then
    concUnpack(n, m, x)
    -- Generations i+1 and older have expired (e is generation i's expiry).
    local i, e = 6, t - 6 * g
    while e <= 0 do
      i, e = i - 1, e + g
    end
    local inf = 0
    for j = 1, i + 1 do
      inf = inf + cg[j]
    end
    if inf + cost > cap then
      local retry, excess = t, inf + cost - cap
      while i > 0 do
        excess = excess - cg[i + 1]
        if excess <= 0 then
          retry = e
          break
        end
        i, e = i - 1, e + g
      end
      return DENIED, cap - inf, t, retry, 0
    end
    if i == 6 and t - l.p + 1 > 0 then
      return ALLOWED, cap - inf - cost, t, 0, 0, n + cost, m, x, t
    end
  end
  local e = concAt(l, t, n, m, x)
  local inf = concSum()
  if cost <= 0 or cost > cap then
    local _, rem, reset = concReport(l, inf, e, 0)
    if cost > 0 then return OVER, rem, reset, 0, 0 end
    return ALLOWED, rem, reset, 0, 0
  elseif inf + cost > cap then
    local code, rem, reset, retry = concReport(l, inf, e, cost)
    return code, rem, reset, retry, 0
  end
  cg[1] = cg[1] + cost
  local code, rem, reset, retry = concReport(l, inf + cost, e, 0)
  local nn, nm, nx, nr = concState(l, e)
  return code, rem, reset, retry, 0, nn, nm, nx, nr
end

-- fastConcUsage returns the function that decides a check, an overdraft or
-- a refund (l.kind) on a concurrency: the Concurrency case of Limit.Check,
-- Overdraft and Refund (decision.go).
local concUsageLib
local function fastConcUsage()
if concUsageLib then return concUsageLib end

-- fastConcOverdraft mirrors Limit.concurrencyOverdraft.
local function fastConcOverdraft(l, t, n, m, x, cost)
  local e = concAt(l, t, n, m, x)
  local nn, nm, nx, nr
  if cost > 0 then
    cg[1] = math.min(cg[1] + math.min(cost, MAXINFLIGHT), MAXINFLIGHT)
    nn, nm, nx, nr = concState(l, e)
  end
  local code, rem, reset, retry = concReport(l, concSum(), e, 0)
  return code, rem, reset, retry, 0, nn, nm, nx, nr
end

-- concRelease takes units (at most the sum of cg) off cg, oldest first.
local function concRelease(units)
  local i = 7
  while units > 0 do
    local c = cg[i]
    if c > 0 then
      local b = math.min(units, c)
      cg[i] = c - b
      units = units - b
    end
    i = i - 1
  end
end

-- fastConcRefund mirrors Limit.concurrencyRefund.
local function fastConcRefund(l, t, n, m, x, units)
  local g = concGen(l)
  if units > 0 and t - 6 * g > 0 then
    -- None of the generations has expired at now.
    concUnpack(n, m, x)
    local inf = concSum()
    if units >= inf then
      return ALLOWED, l.cap, 0, 0, 0, false
    end
    concRelease(units)
    local nn, nm, nx = concPack(0)
    return ALLOWED, l.cap - inf + units, t, 0, 0, nn, nm, nx, t
  end
  local e = concAt(l, t, n, m, x)
  local inf = concSum()
  if units > 0 and inf > 0 then
    local back = math.min(units, inf)
    concRelease(back)
    local nn, nm, nx, nr = concState(l, e)
    local _, rem, reset = concReport(l, inf - back, e, 0)
    return ALLOWED, rem, reset, 0, 0, nn, nm, nx, nr
  end
  local _, rem, reset = concReport(l, inf, e, 0)
  return ALLOWED, rem, reset, 0, 0
end

-- fastConcRefundAt mirrors Limit.concurrencyRefundAt, for a refund
-- charged at l.charged (relative to now).
local function fastConcRefundAt(l, t, n, m, x, units)
  local e = concAt(l, t, n, m, x)
  local g = l.g
  local nxt = e - l.p + 1 -- cg[i+1]'s slot is [nxt-(i+1)·G, nxt-i·G)
  if nxt - g > 0 then
    return fastConcRefund(l, t, n, m, x, units)
  end
  local i = 7 -- a charge FAR_PAST: in no live generation
  if l.charged ~= FAR_PAST then
    i = quo(nxt - 1 - l.charged, g)
  end
  if units > 0 and i < 7 and cg[i + 1] > 0 then
    cg[i + 1] = math.max(cg[i + 1] - units, 0)
    local nn, nm, nx, nr = concState(l, e)
    local _, rem, reset = concReport(l, concSum(), e, 0)
    return ALLOWED, rem, reset, 0, 0, nn, nm, nx, nr
  end
  local _, rem, reset = concReport(l, concSum(), e, 0)
  return ALLOWED, rem, reset, 0, 0
end

concUsageLib = function(l, t, n, m, x)
  local kind = l.kind
  if kind == CHECK then
    local e = concAt(l, t, n, m, x)
    local code, rem, reset, retry = concReport(l, concSum(), e, 1)
    return code, rem, reset, retry, 0
  elseif kind == OVERDRAFT then
    return fastConcOverdraft(l, t, n, m, x, l.cost)
  elseif l.charged then
    return fastConcRefundAt(l, t, n, m, x, l.cost)
  end
  return fastConcRefund(l, t, n, m, x, l.cost)
end
return concUsageLib
end

-- =========================================================================
-- decision.go, kind.go: the dispatch by algorithm and by kind
-- =========================================================================

-- fastDecide mirrors Limit.Decide.
local function fastDecide(l, t, n, m, cost, x)
  local alg = l.alg
  if alg == FIXED then
    return fastFixedWindow(l, t, n, cost)
  elseif alg == SLIDING then
    return fastSlidingWindow(l, t, n, m, cost)
  elseif alg == CONC then
    return fastConcurrency(l, t, n, m, x, cost)
  end
  return fastGcra(l, t, n, cost)
end

-- fastApply mirrors Limit.Apply: the charge of the limit l (and its kind
-- and cost) on the state t, n, m (and x, a concurrency's); a check, an overdraft or a refund is
-- decided by its algorithm's usage function, as Limit.Check, Overdraft and
-- Refund dispatch.
local function fastApply(l, t, n, m, x)
  local kind, alg = l.kind, l.alg
  if kind == ADMIT then
    return fastDecide(l, t, n, m, l.cost, x)
  elseif alg == FIXED then
    return fastFixedUsage()(l, t, n)
  elseif alg == SLIDING then
    return fastSlidingUsage()(l, t, n, m)
  elseif alg == CONC then
    return fastConcUsage()(l, t, n, m, x)
  end
  return fastGcraUsage()(l, t, n)
end

-- =========================================================================
-- A fixed window's count written in place: settle.lua's reads and writes
-- =========================================================================

-- A fixed window's state charged in its window is t = the window's start,
-- n, m = 0 and restAt = the window's end (fastFixedWindow's next state, and
-- decide.lua's), and its key expires at that end: another charge in the
-- same window changes n alone. fixedCount and fixedPutCount take that
-- most common case without unpacking the whole state and packing a new
-- one: the same decision (fastDecide's on t, n, 0) and the same value.

-- fixedCount returns n when v holds a state of the fixed window l's
-- current window (its first 13 bytes, the format byte and t, are those of
-- the window's start, packed once per call), else nil.
local function fixedCount(l, v)
  local mark = l.mark
  if not mark then
    mark = spack("<BdI4", 1, absMs(-sinceWindow(l)))
    l.mark = mark
  end
  if not v or #v ~= 41 or ssub(v, 1, 13) ~= mark then
    return nil
  end
  return (sunpack("<d", v, 14))
end

-- fixedPutCount sets the count of the state under key, which fixedCount
-- found in the current window, to n: STATE's n, bytes 14 to 21, in place.
local function fixedPutCount(key, n)
  redis.call("SETRANGE", key, "13", spack("<d", n))
end

-- fastRead is fastState for the settle paths that write with fastWrite:
-- it returns the same, and whether the state is a fixed window's in its
-- current window (fixedCount), which fastWrite then writes in place, and
-- fastState's x last.
local function fastRead(v, l)
  if l.alg == FIXED then
    local n = fixedCount(l, v)
    if n then
      return true, -l.since, n, 0, nil, true, 0
    end
  end
  local ok, t, n, m, kept, x = fastState(v, l)
  return ok, t, n, m, kept, false, x
end

-- fastWrite writes a charge's next state read by fastRead: its count in
-- place when fastRead found the state in its window, else as fastPut.
local function fastWrite(key, inWindow, t, n, m, restAt, kept, conc)
  if inWindow and t then
    fixedPutCount(key, n)
  else
    fastPut(key, t, n, m, restAt, kept, conc)
  end
end
