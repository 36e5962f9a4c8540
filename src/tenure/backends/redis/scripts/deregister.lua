-- deregister: forget a worker (it stopped cleanly, or the sweeper found it gone).
--
-- KEYS[1]  the fleet prefix
-- ARGV[1]  worker id
-- Returns  1 when this call removed it, 0 when it was not registered

local f, id = KEYS[1], ARGV[1]
redis.call('DEL', f .. 'worker:' .. id)
return redis.call('SREM', f .. 'workers', id)
