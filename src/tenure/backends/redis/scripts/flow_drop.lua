-- flow_drop: delete a workflow abandoned while pending (its producer died
-- between flow_enqueue.lua and flow_commit.lua), a queue at a time: first its
-- home queue (mode 1: the record becomes dropped, so that a late commit is
-- refused, and the home queue's steps go), then each other queue (mode 0),
-- then the record (mode 2). A committed workflow's steps are never touched.
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  the workflow's id, ARGV[2] the mode, ARGV[3..] step ids
-- Returns  {1, the ids of the steps deleted...}, or {0}: the record is neither
--          pending nor dropped (committed meanwhile: the caller stops)

local p, wf, mode = KEYS[1], ARGV[1], ARGV[2]
local rk = wf_key(p, wf)
if mode ~= '0' then
  local state = redis.call('HGET', rk, 'state')
  if state ~= 'pending' and state ~= 'dropped' then return {0} end
end
if mode == '2' then
  local key = redis.call('HGET', rk, 'key')
  if key and redis.call('HGET', p .. 'wfkeys', key) == wf then
    redis.call('HDEL', p .. 'wfkeys', key)
  end
  redis.call('DEL', rk, in_key(p, wf), p .. 'wfjobs:' .. wf)
  redis.call('ZREM', p .. 'wfpending', wf)
  return {1}
end
if mode == '1' then redis.call('HSET', rk, 'state', 'dropped') end
local gone = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local f = redis.call('HMGET', job_key(p, id), 'wf', 'state')
  if f[1] == wf and f[2] == 'waiting' then
    redis.call('DEL', job_key(p, id), in_key(p, id))
    redis.call('ZREM', state_key(p, 'waiting'), id)
    redis.call('ZREM', p .. 'all', id)
    gone[#gone + 1] = id
  end
end
return {1, unpack(gone)}
