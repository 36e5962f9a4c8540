-- touch: a registered worker shows it is alive (last_seen = now).
--
-- KEYS[1]  the fleet prefix
-- ARGV[1]  worker id
-- Returns  1, or 0 when the worker is not registered (the sweeper buried it)

local f, id = KEYS[1], ARGV[1]
if redis.call('SISMEMBER', f .. 'workers', id) == 0 then return 0 end
redis.call('HSET', f .. 'worker:' .. id, 'last_seen', num(clock()))
return 1
