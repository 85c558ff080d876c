-- undo.lua: take back the charges a try-mode settle.lua wrote on one slot
-- when another slot of the same request denied it or failed. After now.lua
-- and the bignums library (bignum.lua and state.lua).
--
-- ARGV[1], ARGV[2] now as readNow takes it ("" for Redis TIME); ARGV[3]
-- linger, as readLinger reads it; then two per key: the value
-- the charge wrote, and the value before it ("" for none). A key is
-- restored only if it still holds what the charge wrote (and then as
-- state.lua's put writes a state, a counter's count as it was with the
-- expiry the charge set, or deleted if it had none): if another request
-- has charged the bucket since, the charge stays (the request then
-- consumed quota there; it never admits more). Bucket states move forward under charges and back only
-- under refunds, so an equal value means that nothing came in between, or
-- that what did cancelled out exactly: either way the restored state is
-- the one without the undone charge. Only admits are undone: a share's
-- overdraft charges and refunds stand (settle.lua does not report them).

readNow(ARGV[1], ARGV[2])
local B = bignums()
readLinger(ARGV[3])
local undone = 0
for i = 1, #KEYS do
  local wrote, before = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  if redis.call("GET", KEYS[i]) == wrote then
    undone = undone + 1
    local restAt = B.restAtOf(before)
    if restAt then
      B.put(KEYS[i], before, restAt)
    elseif string.match(before, "^%d+$") then
      -- A counter's count (settle.lua's counterPut), with the expiry the
      -- charge set: the window's end.
      redis.call("SET", KEYS[i], before, "KEEPTTL")
    else
      redis.call("DEL", KEYS[i])
    end
  end
end
return undone
