-- retry_dead: dead -> queued with budgets reset (attempts, stalls) and history
-- kept; run_at becomes now. A dead job whose key= an unfinished job holds now
-- stays dead (key= allows one unfinished job per queue and key).
--
-- KEYS[1]  the queue's key prefix
-- ARGV     the job ids; none: every dead job of the queue, oldest first
-- Returns  how many jobs moved

local p = KEYS[1]
local ids = ARGV
if #ids == 0 then ids = redis.call('ZRANGE', state_key(p, 'dead'), 0, -1) end
local now = num(clock())
local moved, retried = 0, {}
for _, id in ipairs(ids) do
  local jk = job_key(p, id)
  local f = redis.call('HMGET', jk, 'state', 'key')
  if f[1] == 'dead' and not (f[2] and redis.call('HEXISTS', p .. 'keys', f[2]) == 1) then
    redis.call('HSET', jk, 'attempts', 0, 'stalls', 0, 'run_at', now)
    redis.call('HDEL', jk, 'dead_reason', 'finished_at')
    redis.call('ZREM', p .. RETAINED.dead, id)  -- unfinished again: never pruned
    queue_job(p, id, 'dead')
    if f[2] then redis.call('HSET', p .. 'keys', f[2], id) end
    moved = moved + 1
    retried[moved] = id
  end
end
append_events(p, 'retried_from_dlq', retried, nil)
signal(p, moved)
return moved
