-- state.lua: the stored states on bignums, for decide.lua's path and
-- undo.lua. After now.lua and bignum.lua, inside the bignums library that
-- scripts build only when a charge needs it (see script.go).
--
-- A bucket's state is stored as now.lua's STATE: t, n, m and restAt, when
-- the bucket is back at rest if nothing else arrives. An absent key then
-- decides exactly as the state would, so the key expires at restAt,
-- rounded up to the millisecond (never sooner), and linger after.

local MILLION = small(1000000)
local nowBig

-- bigNow returns now as a bignum.
local function bigNow()
  if not nowBig then
    nowBig = add(mul(small(nowMs), MILLION), small(nowSub))
  end
  return nowBig
end

-- msParts returns the bignum t as whole milliseconds and the nanoseconds
-- beyond them, as numbers (exact: t ≤ MaxTime).
local function msParts(t)
  local q, r = divmod(t, MILLION)
  return num(q), num(r)
end

-- ofMs returns ms·10^6 + sub as a bignum.
local function ofMs(ms, sub)
  return add(mul(small(ms), MILLION), small(sub))
end

-- parseState returns the state v holds ({t, n, m}), or nil when v is nil
-- (no key) or not a state (now.lua's STATE).
local function parseState(v)
  local ok, tMs, tSub, n, m = unpackState(v)
  if not ok then
    return nil
  end
  return { t = ofMs(tMs, tSub), n = n, m = m }
end

-- restAtOf returns the restAt of the state v holds, or nil as parseState.
local function restAtOf(v)
  local ok, _, _, _, _, rMs, rSub = unpackState(v)
  return ok and ofMs(rMs, rSub) or nil
end

-- formatState returns the value in STATE of the state s.
local function formatState(s)
  local tMs, tSub = msParts(s.t)
  local rMs, rSub = msParts(s.restAt)
  return packState(tMs, tSub, s.n, s.m, rMs, rSub)
end

-- ceilMs returns restAt (after now, readNow's) in milliseconds, rounded
-- up, as a number (below 2^53: exact). With restAt - now = q·10^6 + rem,
-- restAt = (nowMs + q)·10^6 + (nowSub + rem), the last term below 2·10^6;
-- restAt - now is small for the periods in use, which doubles divide
-- exactly (below 2^48).
local function ceilMs(restAt, now)
  local q, rem = divmod(csub(restAt, now), MILLION)
  local ms, part = nowMs + num(q), nowSub + num(rem)
  if part > 1000000 then
    return ms + 2
  elseif part > 0 then
    return ms + 1
  end
  return ms
end

-- put stores under key the state value v, whose bucket is at rest at
-- restAt (a bignum): the key expires at restAt rounded up to the
-- millisecond, and linger after (keyExpiry), or is deleted when the
-- bucket is at rest already at now and nothing lingers.
local function put(key, v, restAt)
  local now = bigNow()
  local atRest = cmp(restAt, now) <= 0
  local at = keyExpiry(not atRest and ceilMs(restAt, now), atRest)
  if at then
    redis.call("SET", key, v, expiry, string.format("%.0f", at))
  else
    redis.call("DEL", key)
  end
end

-- formatDecision formats a decision of decide.lua's: "code remaining reset
-- retry delay", hexadecimal; remaining is "-" and the debt when the bucket
-- owes.
local function formatDecision(d)
  local rem = d.rem
  if type(rem) == "string" then
    rem = rem .. " "
  elseif rem < 0 then
    rem = string.format("-%x ", -rem)
  else
    rem = string.format("%x ", rem)
  end
  return string.format("%d ", d.code) .. rem .. tohex(d.reset) .. " " .. tohex(d.retry) .. " " .. tohex(d.delay)
end
