-- quotaledger.lua: one bucket's ledger of quota shares, for daemons that
-- share its limit (package quota, "Limits shared by several daemons";
-- quotaledger.go). The bucket's key holds one entry per daemon, each
-- "id grant until demands;": the most that daemon's clients may be
-- applying together, until when (ms) the entry holds, and its live
-- clients' demands ("d,d,d", or empty). Entries past their until are
-- dropped as they are read.
--
-- KEYS[1]: the bucket's ledger key.
-- ARGV: the daemon's id; the limit; keep; want; lease (ms, 0: remove the
-- daemon's entry); its demands; now in ms ("": Redis TIME); the longest
-- lease (ms) an entry may hold beyond now: a longer one (written by an
-- older daemon, or by one told a report interval of a year) is read, and
-- kept, as ending then; linger (ms): the key expires that long after its
-- last entry's end (PX: how long from now, whatever Redis's clock says).
--
-- The daemon is granted min(want, limit - the others' grants), never less
-- than keep (what its clients may already be applying) nor than 0. It
-- returns the grant and the others' demands, joined by ",".
local key, me = KEYS[1], ARGV[1]
local limit, keep, want, lease = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local demands, now = ARGV[6], ARGV[7]
local maxLease, linger = tonumber(ARGV[8]), tonumber(ARGV[9])
if now == "" then
  local tm = redis.call("TIME")
  now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
else
  now = tonumber(now)
end

local entries, others, otherDemands, last = {}, 0, {}, now
local v = redis.call("GET", key)
if v then
  for id, grant, untilMs, ds in string.gmatch(v, "([^ ;]+) (%d+) (%d+) ([%d,]*);") do
    local u = tonumber(untilMs)
    if u > now + maxLease then
      u = now + maxLease
      untilMs = string.format("%d", u)
    end
    if id ~= me and u > now then
      others = others + tonumber(grant)
      if ds ~= "" then otherDemands[#otherDemands + 1] = ds end
      entries[#entries + 1] = id .. " " .. grant .. " " .. untilMs .. " " .. ds .. ";"
      if u > last then last = u end
    end
  end
end

if lease > maxLease then lease = maxLease end
local grant = math.min(want, limit - others)
if grant < keep then grant = keep end
if grant < 0 then grant = 0 end
if lease > 0 then
  entries[#entries + 1] = string.format("%s %d %d %s;", me, grant, now + lease, demands)
  if now + lease > last then last = now + lease end
end
if #entries == 0 then
  redis.call("DEL", key)
else
  redis.call("SET", key, table.concat(entries), "PX", string.format("%d", last - now + linger))
end
return { string.format("%d", grant), table.concat(otherDemands, ",") }
