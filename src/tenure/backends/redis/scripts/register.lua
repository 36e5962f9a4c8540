-- register: record a worker in the fleet's registry (again, after a reconnect).
--
-- KEYS[1]  the fleet prefix "<prefix>:{@}:"
-- ARGV     worker id, info (JSON: hostname, pid, queues, liveness)
-- Returns  OK (0)

local f, id = KEYS[1], ARGV[1]
local now = num(clock())
redis.call('SADD', f .. 'workers', id)
redis.call('HSET', f .. 'worker:' .. id, 'info', ARGV[2], 'started_at', now, 'last_seen', now)
return OK
