-- orphans: the active jobs held by workers that are gone (unregistered, or
-- registered but their liveness connection is gone), for the sweeper to decide.
-- Changes nothing.
--
-- KEYS[1]  the queue's key prefix
-- ARGV     the gone worker ids
-- Returns  one HGETALL per active job those workers hold

local p = KEYS[1]
local jobs = {}
for _, worker in ipairs(ARGV) do
  for _, id in ipairs(redis.call('SMEMBERS', held_key(p, worker))) do
    local jk = job_key(p, id)
    local f = redis.call('HMGET', jk, 'state', 'worker')
    if f[1] == 'active' and f[2] == worker then jobs[#jobs + 1] = redis.call('HGETALL', jk) end
  end
end
return jobs
