-- decide.lua: internal/core/algorithms' arithmetic, function for function,
-- on bignums (bignum.lua; the constants are now.lua's). Each section is
-- headed by the Go file it mirrors (fixedwindow.go, slidingwindow.go,
-- gcra.go, change.go, decision.go and kind.go), as fast.lua's are, and
-- each function names the Go function it mirrors: read them side by side.
-- Times are bignums of nanoseconds; counts, fractions, Requests, Capacity
-- and costs are below 2^33 and kept as plain numbers, which are exact.
--
-- A limit is {alg, r = Requests, p = Period (bignum), cap = Capacity, rb =
-- small(r)} and, for the buckets, the rationals (whole ns as a bignum, and
-- a remainder over R) that Go computes exactly with math/bits (as
-- Limit.Times does) and passes in: the capacity span C = Capacity·P/R
-- (spanNs, spanFrac), the charge's k = cost·P/R (kNs, kFrac) and a =
-- (Capacity-cost)·P/R (aNs, aFrac), for the cost decided; for a check, an
-- overdraft or a refund also a1 = C - I (a1Ns, a1Frac), and for an
-- overdraft or a refund k of its whole cost or units (at most MaxSpan:
-- Limit.TimesSaturated). A state is {t = bignum, n, m}; the zero State is
-- {t = {}, n = 0, m = 0}. A decision is {code, rem, reset, retry, delay},
-- durations as bignums; rem is the Remaining, or minus the Debt when the
-- bucket owes (a negative number for the windows, a string "-" and
-- hexadecimal for the buckets, whose debt may pass 2^53). Each function that decides returns the next state
-- (nil when unchanged; false for the zero State, a bucket brought back to
-- rest, whose key is deleted) and the decision.

local ZERO, ONE = {}, { 1 }
-- math.MaxInt64 = 2^63 - 1.
local MAXINT64 = { 16777215, 16777215, 32767 }
-- MaxSpan = 2^62 = 2^14 · 2^48: the bound on a bucket's backlog.
local MAXSPAN = { 0, 0, 16384 }

-- newLimit builds a limit from its parts (see the top of this file).
local function newLimit(alg, r, p, cap, spanNs, spanFrac, kNs, kFrac, aNs, aFrac, a1Ns, a1Frac)
  return {
    alg = alg, r = r, rb = small(r), p = p, cap = cap,
    spanNs = spanNs, spanFrac = spanFrac, kNs = kNs, kFrac = kFrac, aNs = aNs, aFrac = aFrac,
    a1Ns = a1Ns, a1Frac = a1Frac,
  }
end

-- windowStart is now - now%P.
local function windowStart(l, now)
  local _, rem = divmod(now, l.p)
  return sub(now, rem)
end

-- =========================================================================
-- fixedwindow.go: FixedWindow
-- =========================================================================

-- fixedWindow mirrors Limit.fixedWindow.
local function fixedWindow(l, s, now, cost)
  local start = windowStart(l, now)
  local count = s.n
  if cmp(start, s.t) > 0 then
    count = 0
  else
    start = s.t
  end
  local stop = add(start, l.p)

  local d = { code = ALLOWED, rem = 0, reset = ZERO, retry = ZERO, delay = ZERO }
  if count > 0 then
    d.reset = csub(stop, now)
  end
  if cost <= 0 or cost > l.cap then
    d.rem = l.cap - count
    if cost > 0 then d.code = OVER end
    return nil, d
  end
  if count + cost > l.cap then
    d.code = DENIED
    d.rem = l.cap - count
    d.retry = csub(stop, now)
    return nil, d
  end
  count = count + cost
  d.rem = l.cap - count
  d.reset = csub(stop, now)
  return { restAt = stop, t = start, n = count, m = 0 }, d
end

-- fixedAt mirrors Limit.fixedAt.
local function fixedAt(l, s, now)
  local start = windowStart(l, now)
  if cmp(start, s.t) > 0 then
    return start, 0
  end
  return s.t, s.n
end

-- fixedReport mirrors Limit.fixedReport.
local function fixedReport(l, start, count, now, extra)
  local d = { code = ALLOWED, rem = l.cap - count, reset = ZERO, retry = ZERO, delay = ZERO }
  if count > 0 then
    d.reset = csub(add(start, l.p), now)
  end
  if count + extra > l.cap then
    d.code, d.retry = DENIED, d.reset
  end
  return d
end

-- fixedOverdraft mirrors Limit.fixedOverdraft.
local function fixedOverdraft(l, s, now, cost)
  local start, count = fixedAt(l, s, now)
  if cost <= 0 then
    return nil, fixedReport(l, start, count, now, 0)
  end
  count = math.min(count + cost, MAXCOUNT)
  return { restAt = add(start, l.p), t = start, n = count, m = 0 }, fixedReport(l, start, count, now, 0)
end

-- fixedRefund mirrors Limit.fixedRefund.
local function fixedRefund(l, s, now, units)
  local start, count = fixedAt(l, s, now)
  local next
  if units > 0 and count > 0 then
    count = math.max(count - units, 0)
    next = false
    if count > 0 then
      next = { restAt = add(start, l.p), t = start, n = count, m = 0 }
    end
  end
  local d = fixedReport(l, start, count, now, 0)
  d.code, d.retry = ALLOWED, ZERO
  return next, d
end

-- =========================================================================
-- slidingwindow.go: SlidingWindow
-- =========================================================================

-- slidingRemaining mirrors Limit.slidingLeft (the Remaining, or minus the
-- Debt); w = prev·(P-e).
local function slidingRemaining(l, cur, prev, e, w)
  local weight = prev
  if #e > 0 and prev > 0 then
    local q, rem = divmod(w, l.p)
    weight = num(q)
    if #rem > 0 then weight = weight + 1 end
  end
  return l.cap - cur - weight
end

-- slidingRetry mirrors Limit.slidingRetry.
local function slidingRetry(l, start, now, cur, prev, k, cost)
  if k >= 0 and prev > 0 then
    local q = divmod(mul(small(k), l.p), small(prev))
    if #q > 0 then
      return csub(add(start, l.p), add(q, now))
    end
  end
  local e2 = ZERO
  local room = l.cap - cost
  if cur > room then
    local q = divmod(mul(small(room), l.p), small(cur))
    e2 = sub(l.p, q)
  end
  return csub(add(add(start, l.p), e2), now)
end

-- slidingWindow mirrors Limit.slidingWindow.
local function slidingWindow(l, s, now, cost)
  local p = l.p
  local start = windowStart(l, now)
  local cur, prev = s.n, s.m
  local e
  if cmp(start, s.t) <= 0 then
    start = s.t
    e = csub(now, start)
  elseif cmp(sub(start, s.t), add(p, p)) < 0 then
    prev, cur = cur, 0
    e = sub(now, start)
  else
    prev, cur = 0, 0
    e = sub(now, start)
  end

  local w = mul(small(prev), csub(p, e))

  local d = { code = ALLOWED, rem = 0, reset = ZERO, retry = ZERO, delay = ZERO }
  if cur > 0 then
    d.reset = csub(add(start, add(p, p)), now)
  elseif prev > 0 then
    d.reset = csub(add(start, p), now)
  end
  if cost <= 0 or cost > l.cap then
    d.rem = slidingRemaining(l, cur, prev, e, w)
    if cost > 0 then d.code = OVER end
    return nil, d
  end

  local k = l.cap - cur - cost
  local kP = ZERO
  if k > 0 then kP = mul(small(k), p) end
  if k < 0 or cmp(w, kP) > 0 then
    d.code = DENIED
    d.rem = slidingRemaining(l, cur, prev, e, w)
    d.retry = slidingRetry(l, start, now, cur, prev, k, cost)
    return nil, d
  end
  cur = cur + cost
  d.rem = slidingRemaining(l, cur, prev, e, w)
  local restAt = add(start, add(p, p))
  d.reset = csub(restAt, now)
  return { restAt = restAt, t = start, n = cur, m = prev }, d
end

-- slidingAt mirrors Limit.slidingAt: start, cur, prev, e.
local function slidingAt(l, s, now)
  local p = l.p
  local start = windowStart(l, now)
  if cmp(start, s.t) <= 0 then
    return s.t, s.n, s.m, csub(now, s.t)
  elseif cmp(sub(start, s.t), add(p, p)) < 0 then
    return start, 0, s.n, sub(now, start)
  end
  return start, 0, 0, sub(now, start)
end

-- slidingReport mirrors Limit.slidingReport.
local function slidingReport(l, start, cur, prev, e, now, extra)
  local p = l.p
  local w = mul(small(prev), csub(p, e))
  local d = { code = ALLOWED, rem = slidingRemaining(l, cur, prev, e, w), reset = ZERO, retry = ZERO, delay = ZERO }
  if cur > 0 then
    d.reset = csub(add(start, add(p, p)), now)
  elseif prev > 0 then
    d.reset = csub(add(start, p), now)
  end
  local k = l.cap - cur - extra
  local kP = ZERO
  if k > 0 then kP = mul(small(k), p) end
  if k < 0 or cmp(w, kP) > 0 then
    d.code = DENIED
    d.retry = slidingRetry(l, start, now, cur, prev, l.cap - cur - 1, 1)
  end
  return d
end

-- slidingState mirrors Limit.slidingState.
local function slidingState(l, start, cur, prev)
  if cur > 0 then
    return { restAt = add(start, add(l.p, l.p)), t = start, n = cur, m = prev }
  elseif prev > 0 then
    return { restAt = add(start, l.p), t = start, n = 0, m = prev }
  end
  return false
end

-- slidingOverdraft mirrors Limit.slidingOverdraft.
local function slidingOverdraft(l, s, now, cost)
  local start, cur, prev, e = slidingAt(l, s, now)
  local next
  if cost > 0 then
    cur = math.min(cur + cost, MAXCOUNT)
    next = slidingState(l, start, cur, prev)
  end
  return next, slidingReport(l, start, cur, prev, e, now, 0)
end

-- slidingRefund mirrors Limit.slidingRefund.
local function slidingRefund(l, s, now, units)
  local start, cur, prev, e = slidingAt(l, s, now)
  local next
  if units > 0 and cur + prev > 0 then
    local back = math.min(units, cur)
    cur = cur - back
    prev = math.max(prev - (units - back), 0)
    next = slidingState(l, start, cur, prev)
  end
  local d = slidingReport(l, start, cur, prev, e, now, 0)
  d.code, d.retry = ALLOWED, ZERO
  return next, d
end

-- =========================================================================
-- gcra.go: TokenBucket, LeakyBucket, LeakyBucketQueue
-- =========================================================================

-- ceilNs mirrors ceilNs: ns + frac/R rounded up, saturating at MaxInt64.
local function ceilNs(ns, frac)
  if frac > 0 and cmp(ns, MAXINT64) < 0 then
    return add(ns, ONE)
  end
  return ns
end

-- gcraDebt mirrors Limit.gcraDebt for a backlog d = dNs + dFrac/R beyond
-- the capacity span C: ceil((d-C)·R/P), at most math.MaxInt64, formatted
-- as a decision's rem is for a debt, "-" and hexadecimal.
local function gcraDebt(l, dNs, dFrac)
  local ns, frac = sub(dNs, l.spanNs), dFrac - l.spanFrac
  if frac < 0 then
    ns, frac = sub(ns, ONE), frac + l.r
  end
  local q, rem = divmod(add(mul(ns, l.rb), small(frac)), l.p)
  if #rem > 0 then q = add(q, ONE) end
  if cmp(q, MAXINT64) > 0 then q = MAXINT64 end
  return "-" .. tohex(q)
end

-- gcraRemaining mirrors Limit.gcraRemaining: floor((C-d)·R/P), or, when
-- the backlog d = dNs + dFrac/R exceeds the capacity span C, the Debt
-- (gcraDebt).
local function gcraRemaining(l, dNs, dFrac)
  local c = cmp(l.spanNs, dNs)
  if c < 0 or c == 0 and l.spanFrac < dFrac then
    return gcraDebt(l, dNs, dFrac)
  end
  local ns, frac = sub(l.spanNs, dNs), l.spanFrac - dFrac
  if frac < 0 then
    ns, frac = sub(ns, ONE), frac + l.r
  end
  -- Fast and still exact: when ns·R < 2^52 (ns < 2^48 is exact as a
  -- double, and a rounded product below 2^52 means a true one below 2^53),
  -- x = ns·R + frac is an exact double, and so is P below 2^53; then
  -- fmod is exact and so is the quotient, as in divmod.
  if #ns <= 2 then
    local prod = num(ns) * l.r
    local pf = num(l.p)
    if prod < 4503599627370496 then
      if pf >= 9007199254740992 then return 0 end
      local x = prod + frac
      return (x - math.fmod(x, pf)) / pf
    end
  end
  local q = divmod(add(mul(ns, l.rb), small(frac)), l.p)
  return num(q)
end

-- gcra mirrors Limit.gcra.
local function gcra(l, s, now, cost)
  local r = l.r
  local frac = s.n
  if frac >= r then frac = r - 1 end
  local dNs, dFrac = ZERO, 0
  if cmp(s.t, now) >= 0 then
    dNs, dFrac = sub(s.t, now), frac
  end

  if cost <= 0 or cost > l.cap then
    local d = { code = ALLOWED, rem = gcraRemaining(l, dNs, dFrac), reset = ceilNs(dNs, dFrac), retry = ZERO, delay = ZERO }
    if cost > 0 then d.code = OVER end
    return nil, d
  end

  -- k = cost·I and a = C - k, passed in. gcra.go computes a as span
  -- minus k with a borrow; (Capacity-cost)·P/R is the same rational, and
  -- a rational has one such form with 0 ≤ frac < R.
  local kNs, kFrac, aNs, aFrac = l.kNs, l.kFrac, l.aNs, l.aFrac
  local c = cmp(dNs, aNs)
  if c > 0 or c == 0 and dFrac > aFrac then
    local wNs, wFrac = sub(dNs, aNs), dFrac - aFrac
    if wFrac < 0 then
      wNs, wFrac = sub(wNs, ONE), wFrac + r
    end
    return nil, {
      code = DENIED,
      rem = gcraRemaining(l, dNs, dFrac),
      reset = ceilNs(dNs, dFrac),
      retry = ceilNs(wNs, wFrac),
      delay = ZERO,
    }
  end

  local delay = ZERO
  if l.alg == QUEUE then
    delay = ceilNs(dNs, dFrac)
  end
  dNs, dFrac = add(dNs, kNs), dFrac + kFrac
  if dFrac >= r then
    dNs, dFrac = add(dNs, ONE), dFrac - r
  end
  local tat = add(now, dNs)
  local reset = ceilNs(dNs, dFrac)
  return { restAt = add(now, reset), t = tat, n = dFrac, m = r }, {
    code = ALLOWED,
    rem = gcraRemaining(l, dNs, dFrac),
    reset = reset,
    retry = ZERO,
    delay = delay,
  }
end

-- backlog mirrors Limit.backlog.
local function backlog(l, s, now)
  if cmp(s.t, now) < 0 then
    return ZERO, 0
  end
  local frac = s.n
  if frac >= l.r then frac = l.r - 1 end
  return sub(s.t, now), frac
end

-- gcraReport mirrors Limit.gcraReport.
local function gcraReport(l, dNs, dFrac, extra)
  local d = { code = ALLOWED, rem = gcraRemaining(l, dNs, dFrac), reset = ceilNs(dNs, dFrac), retry = ZERO, delay = ZERO }
  local limNs, limFrac = l.spanNs, l.spanFrac
  if extra > 0 then
    limNs, limFrac = l.a1Ns, l.a1Frac
  end
  local c = cmp(dNs, limNs)
  if c > 0 or c == 0 and dFrac > limFrac then
    -- d > a1, so the difference is positive.
    local wNs, wFrac = sub(dNs, l.a1Ns), dFrac - l.a1Frac
    if wFrac < 0 then
      wNs, wFrac = sub(wNs, ONE), wFrac + l.r
    end
    d.code = DENIED
    d.retry = ceilNs(wNs, wFrac)
  end
  return d
end

-- gcraState mirrors Limit.gcraState.
local function gcraState(l, now, dNs, dFrac)
  if #dNs == 0 and dFrac == 0 then
    return false
  end
  return { restAt = add(now, ceilNs(dNs, dFrac)), t = add(now, dNs), n = dFrac, m = l.r }
end

-- gcraOverdraft mirrors Limit.gcraOverdraft.
local function gcraOverdraft(l, s, now, cost)
  if cost > 0 and cost <= l.cap then
    local next, d = gcra(l, s, now, cost)
    if d.code == ALLOWED then
      return next, d
    end
  end
  local dNs, dFrac = backlog(l, s, now)
  if cost <= 0 or cmp(dNs, MAXSPAN) >= 0 then
    -- A backlog at the bound already (or past it) stays as it is.
    return nil, gcraReport(l, dNs, dFrac, 0)
  end
  dNs, dFrac = add(dNs, l.kNs), dFrac + l.kFrac
  if dFrac >= l.r then
    dNs, dFrac = add(dNs, ONE), dFrac - l.r
  end
  local c = cmp(dNs, MAXSPAN)
  if c > 0 or c == 0 and dFrac > 0 then
    dNs, dFrac = MAXSPAN, 0
  end
  return gcraState(l, now, dNs, dFrac), gcraReport(l, dNs, dFrac, 0)
end

-- gcraRefund mirrors Limit.gcraRefund.
local function gcraRefund(l, s, now, units)
  local dNs, dFrac = backlog(l, s, now)
  local next
  if units > 0 and (#dNs > 0 or dFrac > 0) then
    local c = cmp(dNs, l.kNs)
    if c < 0 or c == 0 and dFrac <= l.kFrac then
      dNs, dFrac = ZERO, 0
    else
      dNs, dFrac = sub(dNs, l.kNs), dFrac - l.kFrac
      if dFrac < 0 then
        dNs, dFrac = sub(dNs, ONE), dFrac + l.r
      end
    end
    next = gcraState(l, now, dNs, dFrac)
  end
  local d = gcraReport(l, dNs, dFrac, 0)
  d.code, d.retry = ALLOWED, ZERO
  return next, d
end

-- timesSat mirrors Limit.TimesSaturated for n·P/m: whole ns (a bignum)
-- and a remainder over m, or MaxSpan and 0 when that is more than
-- MaxSpan. n·P is below 2^94.
local function timesSat(n, p, m)
  local q, r = divmod(mul(small(n), p), small(m))
  if cmp(q, MAXSPAN) >= 0 then
    return MAXSPAN, 0
  end
  return q, num(r)
end

-- =========================================================================
-- change.go: a bucket's state written at another rate
-- =========================================================================

-- A bucket's state records the Requests it was written at (m; 0 for a
-- state written before states recorded it).

-- rateChanged mirrors Limit.rateChanged.
local function rateChanged(l, s)
  return l.alg >= TOKEN and l.alg <= QUEUE and s.m ~= 0 and s.m ~= l.r
end

-- minus returns aNs + aFrac/r - (bNs + bFrac/r), which is not negative.
local function minus(aNs, aFrac, bNs, bFrac, r)
  local ns, frac = sub(aNs, bNs), aFrac - bFrac
  if frac < 0 then
    ns, frac = sub(ns, ONE), frac + r
  end
  return ns, frac
end

-- at mirrors Limit.at: l's capacity at a rate of m, with k and a for a
-- cost of cost (when 0 < cost ≤ Capacity) and a1.
local function at(l, m, cost)
  local o = { alg = l.alg, r = m, rb = small(m), p = l.p, cap = l.cap }
  local iNs, iFrac = timesSat(1, l.p, m)
  o.spanNs, o.spanFrac = timesSat(l.cap, l.p, m)
  o.a1Ns, o.a1Frac = minus(o.spanNs, o.spanFrac, iNs, iFrac, m)
  if cost > 0 and cost <= l.cap then
    o.kNs, o.kFrac = timesSat(cost, l.p, m)
    o.aNs, o.aFrac = minus(o.spanNs, o.spanFrac, o.kNs, o.kFrac, m)
  end
  return o
end

-- convert mirrors Limit.convert: the state of l with the level of s at
-- now, or false for the zero State.
local function convert(l, s, now)
  if cmp(s.t, now) < 0 then
    return false
  end
  local q, r = divmod(add(mul(sub(s.t, now), small(s.m)), small(s.n)), l.rb)
  if cmp(q, MAXSPAN) > 0 or cmp(q, MAXSPAN) == 0 and #r > 0 then
    return gcraState(l, now, MAXSPAN, 0)
  end
  return gcraState(l, now, q, num(r))
end

-- changed mirrors Limit.gcraChanged (and, for a check, Check's call of
-- the limit at): a charge that writes the bucket is l's on the state
-- converted at now; one that writes nothing reports the state at its own
-- rate, with l's capacity.
local function changed(l, s, now, kind, cost)
  if kind ~= CHECK and cost > 0 then
    local c = convert(l, s, now)
    local cs = c or { t = ZERO, n = 0, m = 0 }
    local next, d
    if kind == OVERDRAFT then
      next, d = gcraOverdraft(l, cs, now, cost)
    elseif kind == REFUND then
      next, d = gcraRefund(l, cs, now, cost)
    else
      next, d = gcra(l, cs, now, cost)
    end
    if kind ~= ADMIT or d.code == ALLOWED then
      if next == nil then next = c end
      return next, d
    end
  end
  local o = at(l, s.m, cost)
  if kind == CHECK then
    local dNs, dFrac = backlog(o, s, now)
    return nil, gcraReport(o, dNs, dFrac, 1)
  elseif kind == OVERDRAFT then
    return gcraOverdraft(o, s, now, cost)
  elseif kind == REFUND then
    return gcraRefund(o, s, now, cost)
  end
  return gcra(o, s, now, cost)
end

-- =========================================================================
-- decision.go, kind.go: the dispatch by algorithm and by kind
-- =========================================================================

-- decide mirrors Limit.Decide; now is already within [0, MaxTime].
local function decide(l, s, now, cost)
  local alg = l.alg
  if alg == FIXED then
    return fixedWindow(l, s, now, cost)
  elseif alg == SLIDING then
    return slidingWindow(l, s, now, cost)
  elseif alg == TOKEN or alg == LEAKY or alg == QUEUE then
    return gcra(l, s, now, cost)
  end
  local d = { code = ALLOWED, rem = 0, reset = ZERO, retry = ZERO, delay = ZERO }
  if cost > 0 then d.code = OVER end
  return nil, d
end

-- apply mirrors Limit.Apply (and store.Charge.Decide): the charge of kind and cost on the
-- state s (for a check the limit's k and a are for a cost of 1).
local function apply(l, s, now, kind, cost)
  if rateChanged(l, s) then
    return changed(l, s, now, kind, cost)
  end
  local alg = l.alg
  if kind == CHECK then
    -- Limit.Check
    if alg == FIXED then
      local start, count = fixedAt(l, s, now)
      return nil, fixedReport(l, start, count, now, 1)
    elseif alg == SLIDING then
      local start, cur, prev, e = slidingAt(l, s, now)
      return nil, slidingReport(l, start, cur, prev, e, now, 1)
    end
    local dNs, dFrac = backlog(l, s, now)
    return nil, gcraReport(l, dNs, dFrac, 1)
  elseif kind == OVERDRAFT then
    if alg == FIXED then
      return fixedOverdraft(l, s, now, cost)
    elseif alg == SLIDING then
      return slidingOverdraft(l, s, now, cost)
    end
    return gcraOverdraft(l, s, now, cost)
  elseif kind == REFUND then
    if alg == FIXED then
      return fixedRefund(l, s, now, cost)
    elseif alg == SLIDING then
      return slidingRefund(l, s, now, cost)
    end
    return gcraRefund(l, s, now, cost)
  end
  return decide(l, s, now, cost)
end

-- refundAt mirrors Limit.RefundAt: a refund of units charged at
-- chargedMs·10^6 + chargedSub (taken as now when later), on the state s.
local function refundAt(l, s, now, units, chargedMs, chargedSub)
  local charged = ofMs(chargedMs, chargedSub)
  if cmp(charged, now) > 0 then
    charged = now
  end
  local alg = l.alg
  if alg == FIXED then
    local w = windowStart(l, now)
    if cmp(charged, w) < 0 and cmp(w, s.t) >= 0 then
      units = 0 -- an earlier window's: its count has passed
    end
    return fixedRefund(l, s, now, units)
  elseif alg == SLIDING then
    local start, cur, prev, e = slidingAt(l, s, now)
    if cmp(now, start) < 0 then
      return slidingRefund(l, s, now, units)
    end
    local next
    if units > 0 then
      local w = windowStart(l, charged)
      if cmp(w, start) == 0 and cur > 0 then
        cur = math.max(cur - units, 0)
        next = slidingState(l, start, cur, prev)
      elseif cmp(add(w, l.p), start) == 0 and prev > 0 then
        prev = math.max(prev - units, 0)
        next = slidingState(l, start, cur, prev)
      end
    end
    local d = slidingReport(l, start, cur, prev, e, now, 0)
    d.code, d.retry = ALLOWED, ZERO
    return next, d
  end
  if units <= 0 then
    return apply(l, s, now, REFUND, 0)
  end
  local c
  if rateChanged(l, s) then
    c = convert(l, s, now) -- written at l's rate from now on
    s = c or { t = ZERO, n = 0, m = 0 }
  end
  -- The part of the charge's backlog that has not drained since.
  local span, kNs, kFrac = sub(now, charged), l.kNs, l.kFrac
  if cmp(kNs, span) < 0 then
    kNs, kFrac = ZERO, 0
  else
    kNs = sub(kNs, span)
  end
  local lk = setmetatable({ kNs = kNs, kFrac = kFrac }, { __index = l })
  local u = 0
  if #kNs > 0 or kFrac > 0 then u = 1 end
  local next, d = gcraRefund(lk, s, now, u)
  if next == nil then next = c end
  return next, d
end

-- decideAny is decide for any state, one written at another rate
-- included (Limit.Decide's call of gcraChanged).
local function decideAny(l, s, now, cost)
  if rateChanged(l, s) then
    return changed(l, s, now, ADMIT, cost)
  end
  return decide(l, s, now, cost)
end
