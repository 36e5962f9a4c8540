-- workers: the fleet's registry.
--
-- KEYS[1]  the fleet prefix
-- Returns  {now, {id, info, started_at, last_seen}...}

local f = KEYS[1]
local out = {num(clock())}
for _, id in ipairs(redis.call('SMEMBERS', f .. 'workers')) do
  local w = redis.call('HMGET', f .. 'worker:' .. id, 'info', 'started_at', 'last_seen')
  if w[1] then out[#out + 1] = {id, w[1], w[2], w[3]} end
end
return out
