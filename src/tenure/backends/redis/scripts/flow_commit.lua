-- flow_commit: a workflow stored in several calls is complete: its record,
-- pending, is running now, and its steps without upstream are released by
-- messages through this queue's outbox (_flow.lua: 'starts', a message per
-- queue and piece of steps), all of them: the relay applies them a batch per
-- call, however many they are.
--
-- KEYS[1]  the home queue's key prefix
-- ARGV[1]  the workflow's id
-- Returns  {1, or 0 when it is not pending (dropped as abandoned), {prefixes to
--          relay from}}

local p, id = KEYS[1], ARGV[1]
local rk = wf_key(p, id)
if redis.call('HGET', rk, 'state') ~= 'pending' then return flow_reply(0) end
redis.call('HSET', rk, 'state', 'running')
wf_counted(p, nil, 'running')
redis.call('ZREM', p .. 'wfpending', id)
-- A message per queue and piece of START_PIECE steps (the relay applies a
-- message whole: it bounds how long one apply holds Redis).
local START_PIECE = 500
local at = redis.call('HGET', rk, 'created_at')  -- a string: cjson keeps 14 digits of a number
for _, e in ipairs(cjson.decode(redis.call('HGET', rk, 'starts'))) do
  local tp, ids = e[1], e[2]
  for i = 1, #ids, START_PIECE do
    flow_post(p, {p = tp, k = 'starts', at = at,
      ids = {unpack(ids, i, math.min(i + START_PIECE - 1, #ids))}})
  end
end
return flow_reply(1)
