-- release: the drain hands the job back, active -> queued; the attempt does not
-- count (attempts - 1) and the job keeps its place in line. With a delay (a
-- worker that does not know the task), active -> scheduled, due in delay seconds.
-- A job whose cancel was requested goes to cancelled instead.
--
-- KEYS[1]  the queue's key prefix
-- ARGV     job id, fence, delay (seconds; '0': queued at once)
-- Returns  OK (0), NOT_FOUND (1) or LEASE_LOST (2: stale fence, nothing changed)

local p, id, fence = KEYS[1], ARGV[1], ARGV[2]
local jk, code = held_job(p, id, fence)
if not jk then return code end
local a = redis.call('HMGET', jk, unpack(ATTEMPT_FIELDS))
leave_active(p, {id}, {a[3]})
redis.call('HINCRBY', jk, 'attempts', -1)
local now, delay = clock(), tonumber(ARGV[3]) or 0
if redis.call('HGET', jk, 'cancel_requested') then  -- it never runs again
  end_cancelled(p, id, jk, now)
  end_attempt(p, id, a, 'released', nil, now)
  record_event(p, 'cancelled', id, '{"outcome":"released"}')
  return OK
elseif delay > 0 then
  schedule_job(p, id, now + delay, 'active')
else
  queue_job(p, id, 'active')
  signal(p, 1)
end
end_attempt(p, id, a, 'released', nil, now)
record_event(p, 'released', id, nil)
return OK
