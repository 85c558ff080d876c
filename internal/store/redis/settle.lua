-- settle.lua: store.Settle over the buckets KEYS, at one instant, in one
-- script (so atomically). After bignum.lua and decide.lua.
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
-- A bucket's state is stored as the string "t n m restAt", hexadecimal.
--
-- Reply: {decisions, committed}, decisions being one "code remaining
-- reset retry delay" (hexadecimal) per key, joined by ",", and committed
-- "1" when the charges were written. In try mode, when committed, the reply
-- goes on with the decisions that Settle reports had the request been
-- denied (the admitted charges as peeks of their old state), then, per key
-- written, its index, its old value ("" for none) and its new value: what
-- the store needs to undo the charges should another slot deny.

local function parseState(v)
  if not v then
    return { t = ZERO, n = 0, m = 0 }
  end
  local t, n, m = string.match(v, "^(%x+) (%x+) (%x+) %x+$")
  if not t then
    return { t = ZERO, n = 0, m = 0 }
  end
  return { t = fromhex(t), n = tonumber(n, 16), m = tonumber(m, 16) }
end

local function formatState(s)
  return tohex(s.t) .. " " .. string.format("%x %x ", s.n, s.m) .. tohex(s.restAt)
end

local function formatDecision(d)
  return string.format("%d %x ", d.code, d.rem) .. tohex(d.reset) .. " " .. tohex(d.retry) .. " " .. tohex(d.delay)
end

local MILLION = small(1000000)

-- now: ARGV's, or Redis TIME (microseconds) in nanoseconds, at most
-- MaxTime as Decide takes it.
local function readNow(arg)
  local now
  if arg ~= "" then
    now = fromhex(arg)
  else
    local tm = redis.call("TIME")
    now = add(mul(small(tonumber(tm[1])), small(1000000000)), small(tonumber(tm[2]) * 1000))
  end
  if cmp(now, MAXTIME) > 0 then now = MAXTIME end
  return now
end

-- write stores a charged state, to expire at its restAt when expire.
local function write(key, s, now, expire)
  local v = formatState(s)
  if expire then
    -- restAt > now for a charged state; round the wait up to whole ms.
    local q, rem = divmod(csub(s.restAt, now), MILLION)
    local ms = num(q)
    if #rem > 0 then ms = ms + 1 end
    if ms < 1 then ms = 1 end
    redis.call("SET", key, v, "PX", ms)
  else
    redis.call("SET", key, v)
  end
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
  local next, d = decide(c.limit, parseState(old), now, c.cost)
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
      local _, p = decide(charges[i].limit, parseState(olds[i]), now, 0)
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
