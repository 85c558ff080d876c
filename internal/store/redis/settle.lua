-- settle.lua: the settle rule (internal/store's package doc; store.Settle
-- in Go) for one request or several, each over its
-- buckets among KEYS, at one instant, in one script (so atomically): the
-- requests are settled one after the other, each all or nothing on its
-- own, as if each had been a script of its own. After now.lua, the bignums library (bignum.lua,
-- state.lua and decide.lua, built only when a charge takes that path) and
-- fast.lua.
--
-- ARGV[1], ARGV[2]  now as readNow takes it: ms and sub decimal, or "" and
--          "" to read Redis TIME
-- ARGV[3]  linger as readLinger takes it: each written key expires that
--          many milliseconds after its bucket is back at rest (keyExpiry)
-- ARGV[4]  "1": try mode, for one slot's share of a request that spans
--          several (see below; then there is one request); "0": whole
--          requests
-- then per request, its number of keys, and one charge per key, for its
-- keys in KEYS in order. When some of its charges are quotas'
-- (store.Charge.Quota), the number of keys is followed, in the same
-- string, by one number per key: the charge's quota, 0 for an ordinary or
-- shadow charge ("3 1 2 0": the first two keys are two quotas, the third
-- an ordinary charge). A charge is one string of space-separated fields
-- (a request's charges on the same limit and cost are the same string,
-- parsed once per script call):
--
--          fast ("1": the charge may take fast.lua's path; "3": it takes
--          it, and its bucket is a counter, see below) and algorithm
--          (1..6) as two digits, Requests, Period (hex), Capacity, shadow
--          ("1" or "0"; "2" for a probe: shadow, and never written) and kind (algorithms.Kind, 0..3) as two digits, cost,
--          and for the buckets C, k and a (see decide.lua), each as whole
--          ns (hex) and remainder over R (decimal), and for a check, an
--          overdraft or a refund a1 = C - I likewise. Requests, Capacity,
--          cost and the remainders are decimal integers below 2^33 (the
--          store passes an admit's cost above Capacity as Capacity+1, a
--          check's as 1, a window's overdraft at most MaxCount and refund
--          at most 2·MaxCount, a bucket's above Capacity as Capacity+1,
--          and a negative one as 0: the decisions are the same; a bucket's
--          overdraft or refund has k of its whole cost, at most MaxSpan);
--          last, for a refund that names when its units were charged
--          (store.Charge.ChargedAt), " @", that instant as readNow takes
--          now (ms and sub decimal): fast.lua refunds it as
--          algorithms.Limit.RefundAt does.
--
-- Each charge is decided on fast.lua's path when its limit and state fit
-- it, and on decide.lua's bignums otherwise: the same decision either way.
-- Each charged bucket's state is written as state.lua's put writes it,
-- but a counter's: a fixed window kept as envoyproxy/ratelimit keeps its
-- counters, a plain count (a decimal integer) under a key that ends in its
-- window's start in Unix seconds, now's window (the store names it at the
-- now it passes), expiring when the window ends (counterState, counterPut).
-- A request is committed (admitted) or not, and its charges written and
-- reported, as the settle rule says. In try mode, quotas deny nothing: the
-- store decides them over every slot's decisions, and undoes the shares
-- when they deny.
--
-- Reply: one flat array. Per request, committed (1 when the charges were
-- written, else 0), then per key its decision: on fast.lua's path five
-- integers, code remaining reset retry delay (integers, because Redis
-- writes a Lua number as an integer reply far more cheaply than Lua
-- formats it); on the bignum path one string, the same five in
-- hexadecimal separated by spaces. In try mode (one request), when
-- committed, the reply goes on with the decisions that Settle reports had
-- the request been denied (the admitted charges as peeks of their old
-- state), one per key as before, then, per admit written, its index (an
-- integer), its old value ("" for none) and its new value: what the store
-- needs to undo the admits should another slot deny (overdraft charges
-- and refunds are never undone). After the last request, the reply ends
-- with now, the instant the script decided at (as readNow read it): its
-- milliseconds and the nanoseconds beyond them, two integers.

readNow(ARGV[1], ARGV[2])
readLinger(ARGV[3])
local try = ARGV[4] == "1"

local match = string.match

-- specs are the charges parsed so far, by their strings.
local specs = {}

-- spec returns the charge ARGV[i] holds, parsed: fast, alg, r, p, cap,
-- shadow, kind, cost, and for the buckets spanNs, spanFrac, kNs, kFrac,
-- aNs, aFrac (and a1Ns, a1Frac for the other kinds), as numbers (the times
-- exact only when fast) and, for the bignum path, as strings (ph, spanHex,
-- kHex, aHex, a1Hex).
local function spec(i)
  local s = ARGV[i]
  local c = specs[s]
  if c then return c end
  -- A refund's charge time, last: relative to now, at most 0.
  local body, cms, csub, charged
  if string.find(s, "@", 1, true) then
    body, cms, csub = match(s, "^(.*) @(%d+) (%d+)$")
  end
  if body then
    charged = relTime(tonumber(cms), tonumber(csub))
    if not charged or charged > 0 then charged = 0 end
  else
    body = s
  end
  local f, alg, r, p, cap, shadow, kind, cost, rest = match(body, "^(%d)(%d) (%d+) (%x+) (%d+) (%d)(%d) (%d+)(.*)$")
  c = {
    fast = f == "1" or f == "3", counter = f == "3", alg = tonumber(alg), r = tonumber(r), ph = p, p = tonumber(p, 16), cap = tonumber(cap),
    shadow = shadow ~= "0", probe = shadow == "2", kind = tonumber(kind), cost = tonumber(cost), charged = charged, cms = tonumber(cms), csub = tonumber(csub),
  }
  c.spanHex, c.kHex, c.aHex, c.a1Hex, c.spanFrac, c.kFrac, c.aFrac, c.a1Frac = "0", "0", "0", "0", 0, 0, 0, 0
  if c.alg >= TOKEN and c.alg <= QUEUE then
    local sn, sf, kn, kf, an, af, more = match(rest, "^ (%x+) (%d+) (%x+) (%d+) (%x+) (%d+)(.*)$")
    c.spanHex, c.kHex, c.aHex = sn, kn, an
    c.spanNs, c.spanFrac = tonumber(sn, 16), tonumber(sf)
    c.kNs, c.kFrac = tonumber(kn, 16), tonumber(kf)
    c.aNs, c.aFrac = tonumber(an, 16), tonumber(af)
    if c.kind ~= ADMIT then
      local a1n, a1f = match(more, "^ (%x+) (%d+)$")
      c.a1Hex, c.a1Ns, c.a1Frac = a1n, tonumber(a1n, 16), tonumber(a1f)
    end
  end
  specs[s] = c
  return c
end

local function bigLimit(B, c)
  local fromhex = B.fromhex
  return B.newLimit(c.alg, c.r, fromhex(c.ph), c.cap, fromhex(c.spanHex), c.spanFrac, fromhex(c.kHex), c.kFrac,
    fromhex(c.aHex), c.aFrac, fromhex(c.a1Hex), c.a1Frac)
end

-- stateOf returns the state v holds, or the zero State for none.
local function stateOf(B, v)
  return B.parseState(v) or { t = B.ZERO, n = 0, m = 0 }
end

-- counterState returns the state a counter under key holds when its value
-- is v, in STATE: t the window's start (the key's last digits, seconds),
-- n the count (at most MAXCOUNT, where a window's count saturates), m 0,
-- restAt the window's end (sp's period after t); nil for no count (no key,
-- 0, or a value that is not a decimal count, decided as none).
local function counterState(key, v, sp)
  if not v or not match(v, "^%d+$") then
    return nil
  end
  local n = math.min(tonumber(v), MAXCOUNT)
  if n == 0 then
    return nil
  end
  local ms = tonumber(match(key, "(%d+)$")) * 1000
  return packState(ms, 0, n, 0, ms + sp.p / 1000000, 0)
end

-- get returns the value of the bucket under key that sp charges, to
-- decide on (a counter's as counterState makes it), and the value as
-- stored.
local function get(key, sp)
  local v = redis.call("GET", key)
  if sp.counter then
    return counterState(key, v, sp), v
  end
  return v, v
end

-- counterPut writes a counter's next state, relative to now as fast.lua's
-- (t false for the zero State): its count n as a decimal integer, expiring
-- at restAt, the window's end, and linger after (PX: how long from now, so
-- that the key lives as long as the window whatever Redis's clock says);
-- the key is deleted when the count is 0. It returns the value written.
local function counterPut(key, t, n, restAt)
  if t == false or n == 0 then
    redis.call("DEL", key)
    return ""
  end
  local v = format("%d", n)
  redis.call("SET", key, v, "PX", format("%d", math.ceil(restAt / 1000000) + linger))
  return v
end

-- put is fastWrite for the charge sp, a counter's as counterPut.
local function put(key, sp, inWindow, t, n, m, restAt, kept)
  if sp.counter then
    counterPut(key, t, n, restAt)
  else
    fastWrite(key, inWindow, t, n, m, restAt, kept, sp.alg == CONC)
  end
end

-- A charge is a table: kind, cost, shadow, and on the fast path (fast
-- true) its limit l, old state t, n, m and its key's expiry kept, decision
-- code, rem, reset, retry, delay and next state nt, nn, nm, nr (nt nil when
-- unchanged, false for the zero State); on the bignum path its limit bl,
-- old state bs, decision d (and code = d.code) and next state (nil when
-- unchanged, false for the zero State).

-- written reports whether a charge of kind whose next state is nt (nil
-- when unchanged) is written in a request committed or not: an admit only
-- when committed, an overdraft or refund always, a check never (its nt is
-- nil), a probe never.
local function written(kind, nt, committed, probe)
  return nt ~= nil and (committed or kind ~= ADMIT) and not probe
end

-- quotasDeny is store.QuotasDeny over a request's count charges: q[i] is
-- charge i's quota (0: none; a shadow charge's is 0), codes[i] its
-- decision's code. The request's quotas deny it iff it has one and each
-- has a denied charge.
local function quotasDeny(q, codes, count)
  local denied, any = {}, false
  for i = 1, count do
    local n = q[i]
    if n ~= 0 then
      any = true
      if codes[i] ~= ALLOWED then
        denied[n] = true
      elseif not denied[n] then
        denied[n] = false
      end
    end
  end
  if not any then
    return false
  end
  for _, d in pairs(denied) do
    if not d then
      return false
    end
  end
  return true
end

-- peeked reports whether Settle reports a charge of a denied request as a
-- peek of its old state: an admit that was allowed (and not a peek).
local function peeked(kind, code, cost)
  return kind == ADMIT and code == ALLOWED and cost ~= 0
end

-- reply is the script's reply, size its length.
local reply, size = {}, 0

-- emitFast appends a decision of fast.lua's path to reply.
local function emitFast(code, rem, reset, retry, delay)
  reply[size + 1], reply[size + 2], reply[size + 3], reply[size + 4], reply[size + 5] = code, rem, reset, retry, delay
  size = size + 5
end

-- emit appends to reply the decision of charge c, or with peek the
-- decision of a peek (cost 0) of its old state.
local function emit(c, peek)
  if c.fast then
    if peek then
      emitFast(fastDecide(c.l, c.t, c.n, c.m, 0, c.x))
    else
      emitFast(c.code, c.rem, c.reset, c.retry, c.delay)
    end
    return
  end
  local B = bignums()
  local d = c.d
  if peek then
    local _, pd = B.decide(c.bl, c.bs, B.bigNow(), 0)
    d = pd
  end
  size = size + 1
  reply[size] = B.formatDecision(d)
end

-- charge decides the charge ARGV[i] on KEYS[key], and returns it and its
-- bucket's old value.
local function charge(key, i)
  local sp = spec(i)
  local kind, cost, shadow = sp.kind, sp.cost, sp.shadow
  local v, old = get(key, sp)
  if sp.fast then
    local ok, t, n, m, kept, x = fastState(v, sp)
    if ok then
      local code, rem, reset, retry, delay, nt, nn, nm, nr = fastApply(sp, t, n, m, x)
      return {
        fast = true, kind = kind, cost = cost, shadow = shadow, probe = sp.probe, l = sp, t = t, n = n, m = m, x = x, kept = kept,
        code = code, rem = rem, reset = reset, retry = retry, delay = delay, nt = nt, nn = nn, nm = nm, nr = nr,
      }, old
    end
  end
  if sp.alg == CONC then
    error("a concurrency's lease must be below 2^49 ns")
  end
  local B = bignums()
  local bl, bs = bigLimit(B, sp), stateOf(B, v)
  local next, d
  if sp.charged then
    next, d = B.refundAt(bl, bs, B.bigNow(), cost, sp.cms, sp.csub)
  else
    next, d = B.apply(bl, bs, B.bigNow(), kind, cost)
  end
  return { kind = kind, cost = cost, shadow = shadow, probe = sp.probe, bl = bl, bs = bs, d = d, code = d.code, nt = next }, old
end

-- store writes c's next state under key (deletes the key for the zero
-- State) and returns the value written.
local function store(key, c)
  if c.fast then
    if c.l.counter then
      return counterPut(key, c.nt, c.nn, c.nr)
    end
    return fastPut(key, c.nt, c.nn, c.nm, c.nr, c.kept, c.l.alg == CONC)
  end
  if c.nt == false then
    redis.call("DEL", key)
    return ""
  end
  local B = bignums()
  local v = B.formatState(c.nt)
  B.put(key, v, c.nt.restAt)
  return v
end

-- settleOneFast settles a request of one charge on the fast path, the
-- most common request, without a table; it returns false, writing
-- nothing, when the charge does not fit the path. (It is settleManyFast
-- for one charge on locals instead of the shared arrays: measured about
-- 0.3 µs less per request, of about 2 µs with its GET and SET.)
local function settleOneFast(key, sp)
  local ok, t, n, m, kept, inWindow, x = fastRead((get(key, sp)), sp)
  if not ok then
    return false
  end
  local code, rem, reset, retry, delay, nt, nn, nm, nr = fastApply(sp, t, n, m, x)
  -- A single charge is reported as it is, committed or not: a denied
  -- admit was not allowed, so has nothing to write.
  local committed = code == ALLOWED or sp.shadow
  if written(sp.kind, nt, committed, sp.probe) then
    put(key, sp, inWindow, nt, nn, nm, nr, kept)
  end
  size = size + 1
  reply[size] = committed and 1 or 0
  emitFast(code, rem, reset, retry, delay)
  return true
end

-- The charges of settleManyFast's request, by index: their limits, old
-- states, keys' expiries and fastRead's inWindow, decisions and next
-- states. Reused by every request of the call (each overwrites what it
-- reads), so that the path makes no table.
local fSp, fT, fN, fM, fX, fKept, fIn, fCode, fRem, fReset, fRetry, fDelay, fNt, fNn, fNm, fNr =
  {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}

-- settleManyFast settles a request of count charges when all of them fit
-- the fast path, as settle's general path does but without a table per
-- charge; it returns false, writing nothing, when one does not fit. q is
-- the request's quotas (nil for none).
local function settleManyFast(k, a, count, q)
  local commit = true
  for i = 1, count do
    local sp = spec(a + i)
    if not sp.fast then
      return false
    end
    local ok, t, n, m, kept, inWindow, x = fastRead((get(KEYS[k + i], sp)), sp)
    if not ok then
      return false
    end
    local code
    code, fRem[i], fReset[i], fRetry[i], fDelay[i], fNt[i], fNn[i], fNm[i], fNr[i] = fastApply(sp, t, n, m, x)
    fSp[i], fT[i], fN[i], fM[i], fX[i], fKept[i], fIn[i], fCode[i] = sp, t, n, m, x, kept, inWindow, code
    if code ~= ALLOWED and not sp.shadow and not (q and q[i] ~= 0) then
      commit = false
    end
  end
  if commit and q then
    commit = not quotasDeny(q, fCode, count)
  end
  size = size + 1
  reply[size] = commit and 1 or 0
  for i = 1, count do
    local sp, code = fSp[i], fCode[i]
    if written(sp.kind, fNt[i], commit, sp.probe) then
      put(KEYS[k + i], sp, fIn[i], fNt[i], fNn[i], fNm[i], fNr[i], fKept[i])
    end
    if not commit and peeked(sp.kind, code, sp.cost) then
      -- Settle's denial: the admitted charges as peeks of their bucket's
      -- old state.
      emitFast(fastDecide(sp, fT[i], fN[i], fM[i], 0, fX[i]))
    else
      emitFast(code, fRem[i], fReset[i], fRetry[i], fDelay[i])
    end
  end
  return true
end

-- settle settles one request: its count keys after KEYS[k], their charges
-- after ARGV[a], q its quotas (nil for none; one quota alone decides as
-- an ordinary charge, so a request of one charge has none). It appends the
-- request's reply to reply.
local function settle(k, a, count, q)
  if not try then
    if count == 1 then
      local sp = spec(a + 1)
      if sp.fast and settleOneFast(KEYS[k + 1], sp) then
        return
      end
    elseif settleManyFast(k, a, count, q) then
      return
    end
  end
  local charges, olds, codes = {}, {}, {}
  local commit = true
  for i = 1, count do
    local c, old = charge(KEYS[k + i], a + i)
    charges[i], olds[i], codes[i] = c, old, c.code
    if c.code ~= ALLOWED and not c.shadow and not (q and q[i] ~= 0) then
      commit = false
    end
  end
  if commit and q and not try then
    commit = not quotasDeny(q, codes, count)
  end

  -- peeks appends every decision, with the admitted charges replaced by
  -- a peek of their bucket's old state: what Settle reports for a denial.
  local function peeks()
    for i = 1, count do
      local c = charges[i]
      emit(c, peeked(c.kind, c.code, c.cost))
    end
  end

  -- Overdraft charges and refunds are written whatever the request
  -- decides; admits only when it is committed.
  local undo = {}
  for i = 1, count do
    local c = charges[i]
    if written(c.kind, c.nt, commit, c.probe) then
      local v = store(KEYS[k + i], c)
      if try and c.kind == ADMIT then
        undo[#undo + 1] = { i, olds[i] or "", v }
      end
    end
  end
  size = size + 1
  if not commit then
    reply[size] = 0
    peeks()
    return
  end
  reply[size] = 1
  for i = 1, count do
    emit(charges[i], false)
  end
  if try then
    peeks()
    for _, w in ipairs(undo) do
      reply[size + 1], reply[size + 2], reply[size + 3] = w[1], w[2], w[3]
      size = size + 3
    end
  end
end

-- counts are the requests' sizes by their strings, parsed once per call
-- (tonumber reads a decimal string with strtod); quotas the quotas of
-- those strings that carry them.
local counts, quotas = {}, {}
local a, k, last = 4, 0, #ARGV
while a < last do
  local cs = ARGV[a + 1]
  local count = counts[cs]
  if not count then
    count = tonumber(cs)
    if not count then
      local q = {}
      for n in string.gmatch(cs, "%d+") do
        q[#q + 1] = tonumber(n)
      end
      count = table.remove(q, 1)
      quotas[cs] = q
    end
    counts[cs] = count
  end
  settle(k, a + 1, count, quotas[cs])
  a, k = a + 1 + count, k + count
end
-- The instant every request was decided at, last.
reply[size + 1], reply[size + 2] = nowMs, nowSub
return reply
