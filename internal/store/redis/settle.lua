-- settle.lua: store.Settle over the buckets KEYS, at one instant, in one
-- script (so atomically). After now.lua, the bignums library (bignum.lua,
-- state.lua and decide.lua, built only when a charge takes that path) and
-- fast.lua.
--
-- ARGV[1], ARGV[2]  now as readNow takes it: ms and sub decimal, or "" and
--          "" to read Redis TIME
-- ARGV[3]  "1": set each written key to expire when its bucket is back at
--          rest; "0": write keys without expiry (tests on injected time)
-- ARGV[4]  "1": try mode, for one slot's share of a request that spans
--          several (see below); "0": the whole request
-- then thirteen per key, for KEYS[i]:
--          algorithm (1..5), Requests, Period (hex), Capacity, cost, shadow
--          ("1" or "0"), fast ("1": the limit may take fast.lua's path),
--          and for the buckets C, k and a (see decide.lua), each as whole
--          ns (hex) and remainder over R (decimal); "0" for the windows.
--          Requests, Capacity, cost and the remainders are decimal
--          integers below 2^33 (the store passes a cost above Capacity as
--          Capacity+1 and a negative one as 0: the decisions are the same).
--
-- Each charge is decided on fast.lua's path when its limit and state fit
-- it, and on decide.lua's bignums otherwise: the same decision either way.
-- Each charged bucket's state is written as state.lua's put writes it.
--
-- Reply: {decisions, committed, paths}, decisions being one "code
-- remaining reset retry delay" (hexadecimal) per key, joined by ",",
-- committed "1" when the charges were written, and paths one letter per
-- key: "f" for fast.lua's path, "b" for the bignums. In try mode, when
-- committed, the reply goes on with the decisions that Settle reports had
-- the request been denied (the admitted charges as peeks of their old
-- state), then, per key written, its index, its old value ("" for none) and
-- its new value: what the store needs to undo the charges should another
-- slot deny.

readNow(ARGV[1], ARGV[2])
local expire = ARGV[3] == "1"
local try = ARGV[4] == "1"

-- A charge: its limit and state on the path it takes (fl and fs, or bl and
-- bs), cost and shadow.
local function fastLimit(b)
  return {
    alg = tonumber(ARGV[b + 1]), r = tonumber(ARGV[b + 2]), p = tonumber(ARGV[b + 3], 16), cap = tonumber(ARGV[b + 4]),
    spanNs = tonumber(ARGV[b + 8], 16), spanFrac = tonumber(ARGV[b + 9]),
    kNs = tonumber(ARGV[b + 10], 16), kFrac = tonumber(ARGV[b + 11]),
    aNs = tonumber(ARGV[b + 12], 16), aFrac = tonumber(ARGV[b + 13]),
  }
end

local function bigLimit(B, b)
  local fromhex = B.fromhex
  return B.newLimit(tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), fromhex(ARGV[b + 3]), tonumber(ARGV[b + 4]),
    fromhex(ARGV[b + 8]), tonumber(ARGV[b + 9]), fromhex(ARGV[b + 10]), tonumber(ARGV[b + 11]),
    fromhex(ARGV[b + 12]), tonumber(ARGV[b + 13]))
end

-- stateOf returns the state v holds, or the zero State for none.
local function stateOf(B, v)
  return B.parseState(v) or { t = B.ZERO, n = 0, m = 0 }
end

-- decideCharge decides charge c at cost on its bucket's old state.
local function decideCharge(c, cost)
  if c.fs then
    return fastDecide(c.fl, c.fs, cost)
  end
  local B = bignums()
  return B.decide(c.bl, c.bs, B.bigNow(), cost)
end

local function formatCharge(c, d)
  if c.fs then
    return fastFormatDecision(d)
  end
  local tohex = bignums().tohex
  return string.format("%d %x ", d.code, d.rem) .. tohex(d.reset) .. " " .. tohex(d.retry) .. " " .. tohex(d.delay)
end

local charges, olds, nexts, decisions, paths = {}, {}, {}, {}, {}
local commit = true
for i = 1, #KEYS do
  local b = 4 + (i - 1) * 13
  local c = { cost = tonumber(ARGV[b + 5]), shadow = ARGV[b + 6] == "1" }
  local old = redis.call("GET", KEYS[i])
  if ARGV[b + 7] == "1" then
    c.fl = fastLimit(b)
    c.fs = fastState(old, c.fl)
  end
  if c.fs then
    paths[i] = "f"
  else
    local B = bignums()
    c.bl, c.bs = bigLimit(B, b), stateOf(B, old)
    paths[i] = "b"
  end
  charges[i], olds[i] = c, old
  local next, d = decideCharge(c, c.cost)
  nexts[i], decisions[i] = next, d
  if d.code ~= ALLOWED and not c.shadow then
    commit = false
  end
end
paths = table.concat(paths)

-- peeks returns every decision, with the admitted charges replaced by a
-- peek of their bucket's old state: what Settle reports for a denial.
local function peeks()
  local out = {}
  for i = 1, #KEYS do
    local c, d = charges[i], decisions[i]
    if d.code == ALLOWED and c.cost ~= 0 then
      local _, p = decideCharge(c, 0)
      d = p
    end
    out[i] = formatCharge(c, d)
  end
  return table.concat(out, ",")
end

if not commit then
  return { peeks(), "0", paths }
end

local out, written = {}, {}
for i = 1, #KEYS do
  local c, d = charges[i], decisions[i]
  out[i] = formatCharge(c, d)
  if d.code == ALLOWED and c.cost > 0 then
    local s, v = nexts[i]
    if c.fs then
      v = fastFormatState(s)
      fastPut(KEYS[i], v, s.restAt, expire)
    else
      local B = bignums()
      v = B.formatState(s)
      B.put(KEYS[i], v, s.restAt, expire)
    end
    written[#written + 1] = { i, olds[i] or "", v }
  end
end
local reply = { table.concat(out, ","), "1", paths }
if try then
  reply[4] = peeks()
  for _, w in ipairs(written) do
    reply[#reply + 1] = tostring(w[1])
    reply[#reply + 1] = w[2]
    reply[#reply + 1] = w[3]
  end
end
return reply
