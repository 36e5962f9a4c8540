-- cancel: waiting | queued | scheduled -> cancelled (a workflow's step: its
-- dependents move, _flow.lua); an active job is marked cancel_requested
-- instead (its worker learns it from its heartbeat).
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  job id
-- ARGV[2]  optional, '1': its workflow is cancelled (cancel_workflow): a step
--          cancelled because a step it waits on failed is now cancelled by
--          hand, so that a DLQ retry of that one no longer makes it wait again
-- Returns  {{OK (0), {HGETALL}, {history}}, {NOT_FOUND (1)} or
--          {INVALID_TRANSITION (3), state}; then {prefixes to relay from}}

local p, id = KEYS[1], ARGV[1]
local jk = job_key(p, id)
local f = redis.call('HMGET', jk, 'state', 'run_at', 'seq', 'ck', 'key', 'uf')
if not f[1] then return flow_reply({NOT_FOUND}) end
if f[1] == 'queued' then
  ck.unready(p, id, f[2], f[3], f[4])
elseif f[1] == 'scheduled' then
  redis.call('ZREM', p .. 'scheduled', id)
elseif f[1] == 'active' then
  redis.call('HSET', jk, 'cancel_requested', '1')
  local job = job_with_history(p, id)
  return flow_reply({OK, job[1], job[2]})
elseif f[1] ~= 'waiting' then
  if ARGV[2] == '1' and f[1] == 'cancelled' then redis.call('HDEL', jk, 'cancel_reason') end
  return flow_reply({INVALID_TRANSITION, f[1]})
end
local now = clock()
redis.call('HSET', jk, 'state', 'cancelled', 'finished_at', num(now))
set_state(p, id, f[3], f[1], 'cancelled')
redis.call('ZADD', p .. RETAINED.cancelled, retained_at(now, f[6]), id)
release_key(p, jk, id, {f[5], f[6]})
local wf = redis.call('HGET', jk, 'wf')
record_event(p, 'cancelled', id, wf and flow_data(wf) or nil)
flow_ended(p, id, jk, 'cancelled')
local job = job_with_history(p, id)
return flow_reply({OK, job[1], job[2]})
