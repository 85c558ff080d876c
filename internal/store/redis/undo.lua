-- undo.lua: take back the charges a try-mode settle.lua wrote on one slot
-- when another slot of the same request denied it. After bignum.lua.
--
-- ARGV[1] now (hex) or "" for Redis TIME; ARGV[2] "1" to set expiry; then
-- two per key: the value the charge wrote, and the value before it ("" for
-- none). A key is restored only if it still holds what the charge wrote:
-- if another request has charged the bucket since, the charge stays (the
-- denied request then consumed quota there; it never admits more). Bucket
-- states only move forward under charges, so an equal value means no
-- charge came in between.

local now
if ARGV[1] ~= "" then
  now = fromhex(ARGV[1])
else
  local tm = redis.call("TIME")
  now = add(mul(small(tonumber(tm[1])), small(1000000000)), small(tonumber(tm[2]) * 1000))
end
local expire = ARGV[2] == "1"
local undone = 0
for i = 1, #KEYS do
  local wrote, before = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  if redis.call("GET", KEYS[i]) == wrote then
    undone = undone + 1
    local restAt = before ~= "" and string.match(before, " (%x+)$")
    if not restAt then
      redis.call("DEL", KEYS[i])
    elseif not expire then
      redis.call("SET", KEYS[i], before)
    else
      local left = csub(fromhex(restAt), now)
      if #left == 0 then
        redis.call("DEL", KEYS[i])
      else
        local q, rem = divmod(left, small(1000000))
        local ms = num(q)
        if #rem > 0 then ms = ms + 1 end
        redis.call("SET", KEYS[i], before, "PX", ms)
      end
    end
  end
end
return undone
