-- now.lua: what every script shares, on plain numbers: the algorithms'
-- and codes' numbers, and now. First in every script.

local FIXED, SLIDING, TOKEN, LEAKY, QUEUE = 1, 2, 3, 4, 5
local ALLOWED, DENIED, OVER = 0, 1, 2
local TWO32 = 4294967296
-- MaxTime = 2^62 - 1 ns = 4611686018427 ms + 387903 ns.
local MAXMS, MAXSUB = 4611686018427, 387903

-- now, read once by readNow, as plain numbers (all exact): nowMs·10^6 +
-- nowSub (nowSub < 10^6), and nowHi·2^32 + nowLo (nowLo < 2^32). The
-- bignum of now is made only when a bignum path asks for it (bigNow).
local nowMs, nowSub, nowHi, nowLo

-- readNow reads now: ms and sub, decimal strings (now = ms·10^6 + sub,
-- sub < 10^6, as the store passes an injected time), or when ms is ""
-- Redis TIME (microseconds) in nanoseconds; at most MaxTime, as Decide
-- takes it.
local function readNow(ms, sub)
  if ms ~= "" then
    nowMs, nowSub = tonumber(ms), tonumber(sub)
  else
    local tm = redis.call("TIME")
    local sec, usec = tonumber(tm[1]), tonumber(tm[2])
    local us = usec % 1000
    nowMs, nowSub = sec * 1000 + (usec - us) / 1000, us * 1000
  end
  if nowMs > MAXMS or nowMs == MAXMS and nowSub > MAXSUB then
    nowMs, nowSub = MAXMS, MAXSUB
  end
  -- nowMs = a·2^21 + b; now = a·10^6·2^21 + b·10^6 + nowSub, every term
  -- below 2^53 when split at 2^32.
  local b = nowMs % 2097152
  local x = (nowMs - b) / 2097152 * 1000000 -- a·10^6 < 2^43
  local xl = x % 2048
  local lo = xl * 2097152 + b * 1000000 + nowSub
  local carry = (lo - lo % TWO32) / TWO32
  nowHi, nowLo = (x - xl) / 2048 + carry, lo - carry * TWO32
end
