-- progress: record a handler's progress report for its current attempt.
--
-- KEYS[1]  the queue's key prefix
-- ARGV     job id, fence, progress (JSON)
-- Returns  OK (0), NOT_FOUND (1) or LEASE_LOST (2: stale fence, nothing changed)

local p, id, fence = KEYS[1], ARGV[1], ARGV[2]
local jk, code = held_job(p, id, fence)
if not jk then return code end
redis.call('HSET', jk, 'progress', ARGV[3])
record_event(p, 'progress', id, '{"progress":' .. ARGV[3] .. '}')
return OK
