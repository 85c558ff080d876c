-- settle.lua: store.Settle over the buckets KEYS, at one instant, in one
-- script (so atomically). After bignum.lua, state.lua and decide.lua.
--
-- ARGV[1]  now in hexadecimal nanoseconds, or "" to read Redis TIME
-- ARGV[2]  "1": set each written key to expire when its bucket is back at
--          rest; "0": write keys without expiry (tests on injected time)
-- ARGV[3]  "1": try mode, for one slot's share of a request that spans
--          several (see below); "0": the whole request
-- then twelve per key, for KEYS[i]:
--          algorithm (1..5), Requests, Period (hex), Capacity, cost, shadow
--          ("1" or "0"), and for the buckets C, k and a (see decide.lua),
--          each as whole ns (hex) and remainder over R (decimal); "0" for
--          the windows. Requests, Capacity, cost and the remainders are
--          decimal integers below 2^33 (the store passes a cost above
--          Capacity as Capacity+1 and a negative one as 0: the decisions
--          are the same).
--
-- Each charged bucket's state is written as state.lua's put writes it.
--
-- Reply: {decisions, committed}, decisions being one "code remaining
-- reset retry delay" (hexadecimal) per key, joined by ",", and committed
-- "1" when the charges were written. In try mode, when committed, the reply
-- goes on with the decisions that Settle reports had the request been
-- denied (the admitted charges as peeks of their old state), then, per key
-- written, its index, its old value ("" for none) and its new value: what
-- the store needs to undo the charges should another slot deny.

-- stateOf returns the state v holds, or the zero State for none.
local function stateOf(v)
  return parseState(v) or { t = ZERO, n = 0, m = 0 }
end

local function formatDecision(d)
  return string.format("%d %x ", d.code, d.rem) .. tohex(d.reset) .. " " .. tohex(d.retry) .. " " .. tohex(d.delay)
end

-- write stores a charged state (its restAt is after now), and returns
-- the value written.
local function write(key, s, now, expire)
  local v = formatState(s)
  put(key, v, s.restAt, now, expire)
  return v
end

local now = readNow(ARGV[1])
local expire = ARGV[2] == "1"
local try = ARGV[3] == "1"

local charges, olds, nexts, decisions = {}, {}, {}, {}
local commit = true
for i = 1, #KEYS do
  local b = 3 + (i - 1) * 12
  local c = {
    limit = newLimit(tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), fromhex(ARGV[b + 3]), tonumber(ARGV[b + 4]),
      fromhex(ARGV[b + 7]), tonumber(ARGV[b + 8]), fromhex(ARGV[b + 9]), tonumber(ARGV[b + 10]),
      fromhex(ARGV[b + 11]), tonumber(ARGV[b + 12])),
    cost = tonumber(ARGV[b + 5]),
    shadow = ARGV[b + 6] == "1",
  }
  charges[i] = c
  local old = redis.call("GET", KEYS[i])
  olds[i] = old
  local next, d = decide(c.limit, stateOf(old), now, c.cost)
  nexts[i], decisions[i] = next, d
  if d.code ~= ALLOWED and not c.shadow then
    commit = false
  end
end

-- peeks returns every decision, with the admitted charges replaced by a
-- peek of their bucket's old state: what Settle reports for a denial.
local function peeks()
  local out = {}
  for i = 1, #KEYS do
    local d = decisions[i]
    if d.code == ALLOWED and charges[i].cost ~= 0 then
      local _, p = decide(charges[i].limit, stateOf(olds[i]), now, 0)
      d = p
    end
    out[i] = formatDecision(d)
  end
  return table.concat(out, ",")
end

if not commit then
  return { peeks(), "0" }
end

local out, written = {}, {}
for i = 1, #KEYS do
  out[i] = formatDecision(decisions[i])
  if decisions[i].code == ALLOWED and charges[i].cost > 0 then
    local v = write(KEYS[i], nexts[i], now, expire)
    written[#written + 1] = { i, olds[i] or "", v }
  end
end
local reply = { table.concat(out, ","), "1" }
if try then
  reply[3] = peeks()
  for _, w in ipairs(written) do
    reply[#reply + 1] = tostring(w[1])
    reply[#reply + 1] = w[2]
    reply[#reply + 1] = w[3]
  end
end
return reply
