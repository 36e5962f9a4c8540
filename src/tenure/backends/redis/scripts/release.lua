-- release: a drain, or a worker that does not know the task, hands the job
-- back, active -> queued; the attempt does not count (attempts - 1) and the
-- job keeps its place in line. A job whose cancel was requested goes to
-- cancelled instead.
--
-- KEYS[1]  the queue's key prefix
-- ARGV     job id, fence
-- Returns  {OK (0), NOT_FOUND (1) or LEASE_LOST (2: stale fence, nothing
--          changed), {prefixes to relay from (_flow.lua)}}

local p, id, fence = KEYS[1], ARGV[1], ARGV[2]
local jk, code = held_job(p, id, fence)
if not jk then return flow_reply(code) end
local a = redis.call('HMGET', jk, unpack(ATTEMPT_FIELDS))
leave_active(p, {id}, {a[3]}, {redis.call('HGET', jk, 'ck')})
redis.call('HINCRBY', jk, 'attempts', -1)
local now = clock()
local c = redis.call('HMGET', jk, 'cancel_requested', 'wf')
if c[1] then  -- it never runs again
  end_cancelled(p, id, jk, now, c[2])
  end_attempt(p, id, a, 'released', nil, now)
  record_event(p, 'cancelled', id, '{"outcome":"released"}')
  return flow_reply(OK)
end
queue_job(p, id, 'active')
signal(p, 1)
end_attempt(p, id, a, 'released', nil, now)
record_event(p, 'released', id, nil)
return flow_reply(OK)
