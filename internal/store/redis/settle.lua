-- settle.lua: store.Settle for one request or several, each over its
-- buckets among KEYS, at one instant, in one script (so atomically): the
-- requests are settled one after the other, each all or nothing on its
-- own, as if each had been a script of its own. After now.lua, the bignums library (bignum.lua,
-- state.lua and decide.lua, built only when a charge takes that path) and
-- fast.lua.
--
-- ARGV[1], ARGV[2]  now as readNow takes it: ms and sub decimal, or "" and
--          "" to read Redis TIME
-- ARGV[3]  "1": set each written key to expire when its bucket is back at
--          rest; "0": write keys without expiry (tests on injected time)
-- ARGV[4]  "1": try mode, for one slot's share of a request that spans
--          several (see below; then there is one request); "0": whole
--          requests
-- then per request, its number of keys, and one charge per key, for its
-- keys in KEYS in order. A charge is one string of space-separated fields
-- (a request's charges on the same limit and cost are the same string,
-- parsed once per script call):
--
--          fast ("1": the limit may take fast.lua's path) and algorithm
--          (1..5) as two digits, Requests, Period (hex), Capacity, shadow
--          ("1" or "0"), cost, and for the buckets C, k and a (see
--          decide.lua), each as whole ns (hex) and remainder over R
--          (decimal). Requests, Capacity, cost and the remainders are
--          decimal integers below 2^33 (the store passes a cost above
--          Capacity as Capacity+1 and a negative one as 0: the decisions
--          are the same).
--
-- Each charge is decided on fast.lua's path when its limit and state fit
-- it, and on decide.lua's bignums otherwise: the same decision either way.
-- Each charged bucket's state is written as state.lua's put writes it.
--
-- Reply: one flat array. Per request, committed (1 when the charges were
-- written, else 0), then per key its decision: on fast.lua's path five
-- integers, code remaining reset retry delay (integers, because Redis
-- writes a Lua number as an integer reply far more cheaply than Lua
-- formats it); on the bignum path one string, the same five in
-- hexadecimal separated by spaces. In try mode (one request), when
-- committed, the reply goes on with the decisions that Settle reports had
-- the request been denied (the admitted charges as peeks of their old
-- state), one per key as before, then, per key written, its index (an
-- integer), its old value ("" for none) and its new value: what the store
-- needs to undo the charges should another slot deny.

readNow(ARGV[1], ARGV[2])
local expire = ARGV[3] == "1"
local try = ARGV[4] == "1"

local match = string.match

-- specs are the charges parsed so far, by their strings.
local specs = {}

-- spec returns the charge ARGV[i] holds, parsed: fast, alg, r, p, cap,
-- shadow, cost, and for the buckets spanNs, spanFrac, kNs, kFrac, aNs,
-- aFrac, as numbers (the times exact only when fast) and, for the bignum
-- path, as strings (ph, spanHex, kHex, aHex).
local function spec(i)
  local s = ARGV[i]
  local c = specs[s]
  if c then return c end
  local f, alg, r, p, cap, shadow, cost, rest = match(s, "^(%d)(%d) (%d+) (%x+) (%d+) (%d) (%d+)(.*)$")
  c = {
    fast = f == "1", alg = tonumber(alg), r = tonumber(r), ph = p, p = tonumber(p, 16), cap = tonumber(cap),
    shadow = shadow == "1", cost = tonumber(cost),
  }
  if c.alg >= TOKEN then
    local sn, sf, kn, kf, an, af = match(rest, "^ (%x+) (%d+) (%x+) (%d+) (%x+) (%d+)$")
    c.spanHex, c.kHex, c.aHex = sn, kn, an
    c.spanNs, c.spanFrac = tonumber(sn, 16), tonumber(sf)
    c.kNs, c.kFrac = tonumber(kn, 16), tonumber(kf)
    c.aNs, c.aFrac = tonumber(an, 16), tonumber(af)
  else
    c.spanHex, c.kHex, c.aHex, c.spanFrac, c.kFrac, c.aFrac = "0", "0", "0", 0, 0, 0
  end
  specs[s] = c
  return c
end

local function bigLimit(B, c)
  local fromhex = B.fromhex
  return B.newLimit(c.alg, c.r, fromhex(c.ph), c.cap, fromhex(c.spanHex), c.spanFrac, fromhex(c.kHex), c.kFrac,
    fromhex(c.aHex), c.aFrac)
end

-- stateOf returns the state v holds, or the zero State for none.
local function stateOf(B, v)
  return B.parseState(v) or { t = B.ZERO, n = 0, m = 0 }
end

-- A charge is a table: cost, shadow, and on the fast path (fast true) its
-- limit l, old state t, n, m and its key's expiry kept, decision code, rem,
-- reset, retry, delay and next state nt, nn, nm, nr (nt nil when
-- unchanged); on the bignum path its limit bl, old state bs, decision d
-- (and code = d.code) and next state.

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
      emitFast(fastDecide(c.l, c.t, c.n, c.m, 0))
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
  local cost, shadow = sp.cost, sp.shadow
  local old = redis.call("GET", key)
  if sp.fast then
    local ok, t, n, m, kept = fastState(old, sp)
    if ok then
      local code, rem, reset, retry, delay, nt, nn, nm, nr = fastDecide(sp, t, n, m, cost)
      return {
        fast = true, cost = cost, shadow = shadow, l = sp, t = t, n = n, m = m, kept = kept,
        code = code, rem = rem, reset = reset, retry = retry, delay = delay, nt = nt, nn = nn, nm = nm, nr = nr,
      }, old
    end
  end
  local B = bignums()
  local bl, bs = bigLimit(B, sp), stateOf(B, old)
  local next, d = B.decide(bl, bs, B.bigNow(), cost)
  return { cost = cost, shadow = shadow, bl = bl, bs = bs, d = d, code = d.code, next = next }, old
end

-- store writes c's charged state under key and returns the value written.
local function store(key, c)
  if c.fast then
    return fastPut(key, c.nt, c.nn, c.nm, c.nr, expire, c.kept)
  end
  local B = bignums()
  local v = B.formatState(c.next)
  B.put(key, v, c.next.restAt, expire)
  return v
end

-- settleOneFast settles a request of one charge on the fast path, the
-- most common request, without a table; it returns false, writing
-- nothing, when the charge does not fit the path. (It is settleManyFast
-- for one charge on locals instead of the shared arrays: measured about
-- 0.3 µs less per request, of about 2 µs with its GET and SET.)
local function settleOneFast(key, sp)
  local cost = sp.cost
  local ok, t, n, m, kept, inWindow = fastRead(redis.call("GET", key), sp)
  if not ok then
    return false
  end
  local code, rem, reset, retry, delay, nt, nn, nm, nr = fastDecide(sp, t, n, m, cost)
  if code ~= ALLOWED and not sp.shadow then
    -- Denied: a single charge is not admitted, so reported as it is.
    size = size + 1
    reply[size] = 0
  else
    if code == ALLOWED and cost > 0 then
      fastWrite(key, inWindow, nt, nn, nm, nr, expire, kept)
    end
    size = size + 1
    reply[size] = 1
  end
  emitFast(code, rem, reset, retry, delay)
  return true
end

-- The charges of settleManyFast's request, by index: their limits, old
-- states, keys' expiries and fastRead's inWindow, decisions and next
-- states. Reused by every request of the call (each overwrites what it
-- reads), so that the path makes no table.
local fSp, fT, fN, fM, fKept, fIn, fCode, fRem, fReset, fRetry, fDelay, fNt, fNn, fNm, fNr =
  {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}

-- settleManyFast settles a request of count charges when all of them fit
-- the fast path, as settle's general path does but without a table per
-- charge; it returns false, writing nothing, when one does not fit.
local function settleManyFast(k, a, count)
  local commit = true
  for i = 1, count do
    local sp = spec(a + i)
    if not sp.fast then
      return false
    end
    local ok, t, n, m, kept, inWindow = fastRead(redis.call("GET", KEYS[k + i]), sp)
    if not ok then
      return false
    end
    local code
    code, fRem[i], fReset[i], fRetry[i], fDelay[i], fNt[i], fNn[i], fNm[i], fNr[i] = fastDecide(sp, t, n, m, sp.cost)
    fSp[i], fT[i], fN[i], fM[i], fKept[i], fIn[i], fCode[i] = sp, t, n, m, kept, inWindow, code
    if code ~= ALLOWED and not sp.shadow then
      commit = false
    end
  end
  size = size + 1
  if not commit then
    -- Settle's denial: every decision, the admitted charges as peeks of
    -- their bucket's old state.
    reply[size] = 0
    for i = 1, count do
      local sp = fSp[i]
      if fCode[i] == ALLOWED and sp.cost ~= 0 then
        emitFast(fastDecide(sp, fT[i], fN[i], fM[i], 0))
      else
        emitFast(fCode[i], fRem[i], fReset[i], fRetry[i], fDelay[i])
      end
    end
    return true
  end
  reply[size] = 1
  for i = 1, count do
    local code = fCode[i]
    if code == ALLOWED and fSp[i].cost > 0 then
      fastWrite(KEYS[k + i], fIn[i], fNt[i], fNn[i], fNm[i], fNr[i], expire, fKept[i])
    end
    emitFast(code, fRem[i], fReset[i], fRetry[i], fDelay[i])
  end
  return true
end

-- settle settles one request: its count keys after KEYS[k], their charges
-- after ARGV[a]. It appends the request's reply to reply.
local function settle(k, a, count)
  if not try then
    if count == 1 then
      local sp = spec(a + 1)
      if sp.fast and settleOneFast(KEYS[k + 1], sp) then
        return
      end
    elseif settleManyFast(k, a, count) then
      return
    end
  end
  local charges, olds = {}, {}
  local commit = true
  for i = 1, count do
    local c, old = charge(KEYS[k + i], a + i)
    charges[i], olds[i] = c, old
    if c.code ~= ALLOWED and not c.shadow then
      commit = false
    end
  end

  -- peeks appends every decision, with the admitted charges replaced by
  -- a peek of their bucket's old state: what Settle reports for a denial.
  local function peeks()
    for i = 1, count do
      local c = charges[i]
      emit(c, c.code == ALLOWED and c.cost ~= 0)
    end
  end

  size = size + 1
  if not commit then
    reply[size] = 0
    peeks()
    return
  end
  reply[size] = 1
  local written = {}
  for i = 1, count do
    local c = charges[i]
    emit(c, false)
    if c.code == ALLOWED and c.cost > 0 then
      local v = store(KEYS[k + i], c)
      if try then
        written[#written + 1] = { i, olds[i] or "", v }
      end
    end
  end
  if try then
    peeks()
    for _, w in ipairs(written) do
      reply[size + 1], reply[size + 2], reply[size + 3] = w[1], w[2], w[3]
      size = size + 3
    end
  end
end

-- counts are the requests' sizes by their strings, parsed once per call
-- (tonumber reads a decimal string with strtod).
local counts = {}
local a, k, last = 4, 0, #ARGV
while a < last do
  local cs = ARGV[a + 1]
  local count = counts[cs]
  if not count then
    count = tonumber(cs)
    counts[cs] = count
  end
  settle(k, a + 1, count)
  a, k = a + 1 + count, k + count
end
return reply
