-- purge_dead: delete dead jobs, with their history (a workflow's step: its
-- edges, and its workflow's record learns it is gone, as prune.lua does).
--
-- KEYS[1]  the queue's key prefix
-- ARGV     the job ids; none: every dead job of the queue
-- Returns  {the ids deleted (the caller drops them from the fleet's id index),
--          {prefixes to relay from}, {workflows deleted}} (_flow.lua)

local p = KEYS[1]
local ids = ARGV
if #ids == 0 then ids = redis.call('ZRANGE', state_key(p, 'dead'), 0, -1) end
local gone = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', job_key(p, id), 'state', 'wf', 'home')
  if f[1] == 'dead' then
    if f[2] then flow_send(p, {p = f[3], d = f[2], k = 'gone', s = id}) end
    redis.call('DEL', job_key(p, id), history_key(p, id), in_key(p, id), p .. 'spawns:' .. id)
    redis.call('ZREM', state_key(p, 'dead'), id)
    redis.call('ZREM', p .. RETAINED.dead, id)
    redis.call('ZREM', p .. 'all', id)
    gone[#gone + 1] = id
  end
end
append_events(p, 'purged', gone, nil)
flow_run(p)
return flow_reply(gone)
