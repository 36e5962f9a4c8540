-- flow_commit: a workflow stored in several calls is complete: its record,
-- pending, is running now, and its steps without upstream are released by
-- messages through this queue's outbox (_flow.lua), all of them: the relay
-- applies them a batch per call, however many they are.
--
-- KEYS[1]  the home queue's key prefix
-- ARGV[1]  the workflow's id
-- Returns  {1, or 0 when it is not pending (dropped as abandoned), {prefixes to
--          relay from}}

local p, id = KEYS[1], ARGV[1]
local rk = wf_key(p, id)
if redis.call('HGET', rk, 'state') ~= 'pending' then return flow_reply(0) end
redis.call('HSET', rk, 'state', 'running')
redis.call('ZREM', p .. 'wfpending', id)
for _, e in ipairs(cjson.decode(redis.call('HGET', rk, 'starts'))) do
  flow_post(p, {p = e[1], d = e[2], k = 'start'})
end
return flow_reply(1)
