-- delete_queue: delete a queue, in pieces so that no call holds Redis long:
-- up to ARGV[1] of its jobs per call, with their history; the call that
-- finds none left deletes the rest of its keys (policy, events, rate bucket,
-- wake-ups, indexes). Refused, changing nothing, while a job of it is active.
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  how many jobs to delete in this call, at most
-- Returns  {INVALID_TRANSITION, active jobs}, or {OK, jobs left, ids deleted...}:
--          the caller drops the ids from the fleet's id index and calls again
--          until a call deletes none

local p = KEYS[1]
local active = redis.call('ZCARD', state_key(p, 'active'))
if active > 0 then return {INVALID_TRANSITION, active} end
local ids = redis.call('ZRANGE', p .. 'all', 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then
  redis.call('DEL', p .. 'ready', p .. 'scheduled', p .. 'leases', p .. 'seq', p .. 'keys', p .. 'wfcount',
    p .. 'holders', p .. 'signal', p .. 'policy', p .. 'events', p .. 'rate',
    p .. RETAINED.completed, p .. RETAINED.dead, p .. 'retained:backfill', p .. 'outbox',
    p .. 'wfkeys', p .. 'wfpending', p .. 'ukeys', p .. 'kact', p .. 'kload', p .. 'krate',
    p .. 'knone', p .. 'kopen', p .. 'khead', p .. 'kwait', p .. 'kturn', p .. 'kfull')
  for _, state in ipairs({'waiting', 'scheduled', 'queued', 'active', 'completed', 'dead', 'cancelled'}) do
    redis.call('DEL', state_key(p, state))
  end
  return {OK, 0}
end
for _, id in ipairs(ids) do
  local jk = job_key(p, id)
  local f = redis.call('HMGET', jk, 'state', 'run_at', 'seq', 'ck')
  if f[1] then redis.call('ZREM', state_key(p, f[1]), id) end
  if f[1] == 'queued' then
    ck.unready(p, id, f[2], f[3], f[4])
  end
  redis.call('ZREM', p .. 'scheduled', id)
  redis.call('DEL', jk, history_key(p, id), in_key(p, id), p .. 'spawns:' .. id)
end
call_with('ZREM', p .. 'all', ids)
return {OK, redis.call('ZCARD', p .. 'all'), unpack(ids)}
