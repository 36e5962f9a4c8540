-- retry_dead: dead -> queued with budgets reset (budget_from = attempts, which
-- keep counting; stalls) and history kept; run_at becomes now. A dead job whose
-- key= an unfinished job holds now stays dead (key= allows one unfinished job
-- per queue and key). Each gets a 'retried' event {by, attempts}.
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  who retries (a RetriedBy)
-- ARGV[2..] the job ids; none: every dead job of the queue, oldest first
-- Returns  {how many jobs moved, {prefixes to relay from}}; a workflow's step's
--          failed edges open again (_flow.lua)

local p = KEYS[1]
local by = ARGV[1]
local ids = {}
for i = 2, #ARGV do ids[i - 1] = ARGV[i] end
if #ids == 0 then ids = redis.call('ZRANGE', state_key(p, 'dead'), 0, -1) end
local now = num(clock())
local moved, retried, data = 0, {}, {}
for _, id in ipairs(ids) do
  local jk = job_key(p, id)
  local f = redis.call('HMGET', jk, 'state', 'key', 'attempts')
  if f[1] == 'dead' and not (f[2] and redis.call('HEXISTS', p .. 'keys', f[2]) == 1) then
    local attempts = tonumber(f[3] or '0')
    redis.call('HSET', jk, 'budget_from', attempts, 'stalls', 0, 'run_at', now)
    redis.call('HDEL', jk, 'dead_reason', 'finished_at')
    redis.call('ZREM', p .. RETAINED.dead, id)  -- unfinished again: never pruned
    queue_job(p, id, 'dead')
    flow_ended(p, id, jk, 'queued')
    if f[2] then redis.call('HSET', p .. 'keys', f[2], id) end
    moved = moved + 1
    retried[moved] = id
    data[moved] = cjson.encode({by = by, attempts = attempts})
  end
end
append_events(p, 'retried', retried, data)
signal(p, moved)
return flow_reply(moved)
