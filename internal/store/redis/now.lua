-- now.lua: what every script shares, on plain numbers: the algorithms'
-- and codes' numbers, now, and the stored states' format. First in every
-- script.

local FIXED, SLIDING, TOKEN, LEAKY, QUEUE, CONC = 1, 2, 3, 4, 5, 6
local ALLOWED, DENIED, OVER = 0, 1, 2
-- algorithms.Kind: how a charge is applied.
local ADMIT, CHECK, OVERDRAFT, REFUND = 0, 1, 2, 3
-- algorithms.MaxCount: a window's count saturates there.
local MAXCOUNT = 4294967295
-- algorithms.MaxInFlight: a concurrency's generation count saturates there.
local MAXINFLIGHT = 65535
-- MaxTime = 2^62 - 1 ns = 4611686018427 ms + 387903 ns.
local MAXMS, MAXSUB = 4611686018427, 387903

-- now, read once by readNow, as plain numbers (both exact): nowMs·10^6 +
-- nowSub (nowSub < 10^6). The bignum of now is made only when a bignum
-- path asks for it (bigNow).
local nowMs, nowSub

-- expiry is how keys are given their expiry (keyExpiry), set by readNow:
-- "PXAT", an instant on Redis's clock, when now is Redis TIME; "PX", a
-- length of time from now, when now is the store's clock, which Redis's
-- need not agree with. Either way a key's expiry derives from now.
local expiry = "PXAT"

-- readNow reads now: ms and sub, decimal strings (now = ms·10^6 + sub,
-- sub < 10^6, as the store passes its clock's time), or when ms is ""
-- Redis TIME (microseconds) in nanoseconds; at most MaxTime, as Decide
-- takes it.
local function readNow(ms, sub)
  if ms ~= "" then
    nowMs, nowSub = tonumber(ms), tonumber(sub)
    expiry = "PX"
  else
    local tm = redis.call("TIME")
    local sec, usec = tonumber(tm[1]), tonumber(tm[2])
    local us = usec % 1000
    nowMs, nowSub = sec * 1000 + (usec - us) / 1000, us * 1000
  end
  if nowMs > MAXMS or nowMs == MAXMS and nowSub > MAXSUB then
    nowMs, nowSub = MAXMS, MAXSUB
  end
end

-- linger, read by readLinger: how long (ms) a key outlives its bucket's
-- return to rest (Config.Linger; 0: not at all).
local linger = 0

-- readLinger reads linger from a (ARGV[3] of settle.lua and undo.lua), a
-- decimal number of milliseconds.
local function readLinger(a)
  linger = tonumber(a)
end

-- keyExpiry returns expiry's argument for a key whose bucket is back at
-- rest at the millisecond ms (its restAt rounded up: never sooner), or at
-- now already when atRest, the key then to outlive it by linger; or nil
-- when the key is to be deleted instead (at rest, and no linger).
local function keyExpiry(ms, atRest)
  if atRest then
    if linger == 0 then
      return nil
    end
    ms = nowMs
  end
  if expiry == "PX" then
    return ms - nowMs + linger
  end
  return ms + linger
end

-- A bucket's state is stored as STATE, 41 bytes (a Redis string of at
-- most 44 bytes is one allocation): a format byte, 1; t as whole
-- milliseconds and the nanoseconds beyond them; n and m; restAt as t is.
-- Every field is an integer below 2^53 (times at most MaxTime + MaxSpan =
-- MaxInt64 ns, a backlog of MaxSpan at MaxTime; counts below 2^33), which doubles and the 32-bit field (below 10^6) hold
-- exactly.
local STATE = "<BdI4dddI4"
local spack, sunpack, sbyte = struct.pack, struct.unpack, string.byte

-- unpackState returns true and tMs, tSub, n, m, rMs, rSub from a value in
-- STATE, or false for any other value and for none (v nil or false).
local function unpackState(v)
  if not v or #v ~= 41 or sbyte(v) ~= 1 then
    return false
  end
  local _, tMs, tSub, n, m, rMs, rSub = sunpack(STATE, v)
  return true, tMs, tSub, n, m, rMs, rSub
end

-- packState returns the value in STATE of t = tMs·10^6 + tSub, n, m and
-- restAt = rMs·10^6 + rSub.
local function packState(tMs, tSub, n, m, rMs, rSub)
  return spack(STATE, 1, tMs, tSub, n, m, rMs, rSub)
end
