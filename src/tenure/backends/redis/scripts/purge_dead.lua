-- purge_dead: delete dead jobs, with their history.
--
-- KEYS[1]  the queue's key prefix
-- ARGV     the job ids; none: every dead job of the queue
-- Returns  the ids deleted (the caller drops them from the fleet's id index)

local p = KEYS[1]
local ids = ARGV
if #ids == 0 then ids = redis.call('ZRANGE', state_key(p, 'dead'), 0, -1) end
local gone = {}
for _, id in ipairs(ids) do
  if redis.call('HGET', job_key(p, id), 'state') == 'dead' then
    redis.call('DEL', job_key(p, id), history_key(p, id), in_key(p, id), out_key(p, id),
      p .. 'spawns:' .. id)
    redis.call('ZREM', state_key(p, 'dead'), id)
    redis.call('ZREM', p .. RETAINED.dead, id)
    redis.call('ZREM', p .. 'all', id)
    gone[#gone + 1] = id
  end
end
append_events(p, 'purged', gone, nil)
return gone
