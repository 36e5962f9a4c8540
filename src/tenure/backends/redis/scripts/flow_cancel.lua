-- flow_cancel: running -> cancelled, by hand, with a workflow_ended event
-- (the caller then cancels its unfinished steps); an ended one is unchanged.
--
-- KEYS[1]  the home queue's key prefix
-- ARGV[1]  the workflow's id
-- Returns  {its state ('' = none, or pending: absent), {job ids}}

local p, id = KEYS[1], ARGV[1]
local rk = wf_key(p, id)
local f = redis.call('HMGET', rk, 'state', 'key')
if not f[1] or f[1] == 'pending' or f[1] == 'dropped' then return {'', {}} end
if f[1] == 'running' then
  redis.call('HSET', rk, 'state', 'cancelled', 'finished_at', num(clock()))
  record_event(p, 'workflow_ended', id, flow_data(id, {outcome = 'cancelled'}))
  if f[2] and redis.call('HGET', p .. 'wfkeys', f[2]) == id then
    redis.call('HDEL', p .. 'wfkeys', f[2])
  end
  f[1] = 'cancelled'
end
return {f[1], redis.call('ZRANGE', p .. 'wfjobs:' .. id, 0, -1)}
