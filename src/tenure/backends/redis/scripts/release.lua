-- release: the drain hands the job back, active -> queued; the attempt does not
-- count (attempts - 1) and the job keeps its place in line.
--
-- KEYS[1]  the queue's key prefix
-- ARGV     job id, fence
-- Returns  OK (0), NOT_FOUND (1) or LEASE_LOST (2: stale fence, nothing changed)

local p, id, fence = KEYS[1], ARGV[1], ARGV[2]
local jk, code = held_job(p, id, fence)
if not jk then return code end
local a = redis.call('HMGET', jk, unpack(ATTEMPT_FIELDS))
leave_active(p, {id}, {a[3]})
redis.call('HINCRBY', jk, 'attempts', -1)
queue_job(p, id, 'active')
signal(p, 1)
end_attempt(p, id, a, 'released', nil, clock())
record_event(p, 'released', id, nil)
return OK
