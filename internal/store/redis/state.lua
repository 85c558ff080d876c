-- state.lua: what settle.lua and undo.lua share about time and stored
-- states. After bignum.lua.
--
-- A bucket's state is stored as the string "t n m restAt", hexadecimal,
-- restAt being when the bucket is back at rest if nothing else arrives: an
-- absent key then decides exactly as the state would, so the key expires
-- at restAt, rounded up to the millisecond (never sooner).

-- MaxTime = 2^62 - 1, the latest now Decide distinguishes.
local MAXTIME = sub(small(2 ^ 62), { 1 })
local MILLION = small(1000000)

-- The now readNow returned, split as nowMs·10^6 + nowRest (numbers, exact):
-- TIME gives them for free, where dividing now (about 2^61) would take the
-- long division.
local nowMs, nowRest

-- readNow returns now: arg, hexadecimal nanoseconds, or when arg is ""
-- Redis TIME (microseconds) in nanoseconds; at most MaxTime, as Decide
-- takes it. A script reads it once.
local function readNow(arg)
  local now
  if arg ~= "" then
    now = fromhex(arg)
  else
    local tm = redis.call("TIME")
    local sec, usec = tonumber(tm[1]), tonumber(tm[2])
    now = add(mul(small(sec), small(1000000000)), small(usec * 1000))
    nowMs, nowRest = sec * 1000 + math.floor(usec / 1000), (usec % 1000) * 1000
  end
  if cmp(now, MAXTIME) > 0 then
    now, nowMs = MAXTIME, nil
  end
  if not nowMs then
    local q, r = divmod(now, MILLION)
    nowMs, nowRest = num(q), num(r)
  end
  return now
end

-- parseState returns the state v holds ({t, n, m}), or nil when v is nil
-- (no key) or not a state.
local function parseState(v)
  if not v then
    return nil
  end
  local t, n, m = string.match(v, "^(%x+) (%x+) (%x+) %x+$")
  if not t then
    return nil
  end
  return { t = fromhex(t), n = tonumber(n, 16), m = tonumber(m, 16) }
end

-- restAtOf returns the restAt of the state v holds, or nil as parseState.
local function restAtOf(v)
  local restAt = v and string.match(v, "^%x+ %x+ %x+ (%x+)$")
  return restAt and fromhex(restAt)
end

local function formatState(s)
  return tohex(s.t) .. " " .. string.format("%x %x ", s.n, s.m) .. tohex(s.restAt)
end

-- ceilMs returns restAt (after now, readNow's) in milliseconds, rounded
-- up, as a number (below 2^53: exact). With restAt - now = q·10^6 + rem,
-- restAt = (nowMs + q)·10^6 + (nowRest + rem), the last term below 2·10^6;
-- restAt - now is small for the periods in use, which doubles divide
-- exactly (below 2^48).
local function ceilMs(restAt, now)
  local q, rem = divmod(csub(restAt, now), MILLION)
  local ms, part = nowMs + num(q), nowRest + num(rem)
  if part > 1000000 then
    return ms + 2
  elseif part > 0 then
    return ms + 1
  end
  return ms
end

-- put stores under key the state value v, whose bucket is at rest at
-- restAt; now is readNow's. With expire, the key expires at restAt rounded up to the
-- millisecond (PXAT), or is deleted when the bucket is at rest already at
-- now; without (tests on injected time), the key does not expire.
local function put(key, v, restAt, now, expire)
  if not expire then
    redis.call("SET", key, v)
  elseif cmp(restAt, now) <= 0 then
    redis.call("DEL", key)
  else
    redis.call("SET", key, v, "PXAT", string.format("%.0f", ceilMs(restAt, now)))
  end
end
