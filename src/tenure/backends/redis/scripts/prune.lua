-- prune: retention in one queue. Deletes up to ARGV[1] finished jobs that
-- finished longer ago than the queue's policy keeps them, by Redis's clock
-- (completed and cancelled: keep_completed; dead: keep_dead), oldest first,
-- each with its history and every index entry: state:<state>, all,
-- retained:*, and the fleet's id index when KEYS[2] names it. Records no
-- event. Cost: the jobs deleted (the retained:* sets are sorted by
-- finished_at), whatever the queue's size, and once per queue a walk of the
-- jobs that finished before those sets existed (below), 250 a call.
--
-- KEYS[1]  the queue's key prefix
-- KEYS[2]  optional: the fleet's id index (<prefix>:{@}:jobs), where one script
--          may touch two slots (not on Cluster: the caller deletes the ids)
-- ARGV[1]  at most this many jobs; 0: delete none, count those due
-- ARGV[2]  keep_completed for a queue whose policy does not say ('' = forever)
-- ARGV[3]  keep_dead, likewise
-- Returns  {{how many deleted (counting: due), {ids deleted}}, {prefixes to
--          relay from}} (_flow.lua)

local p, limit = KEYS[1], tonumber(ARGV[1])
local TEN_YEARS = 315576000  -- the policy's bound (config.MAX_SECONDS)

-- The seconds a finished job is kept (nil: forever), as QueuePolicy.from_json
-- reads a stored policy: null keeps forever, a number is brought within its
-- bounds, anything else gives way to the default.
local function keep_of(field, default)
  local policy = policy_of(p)
  local value = policy and policy[field]
  if value == cjson.null then return nil end
  if type(value) ~= 'number' or value ~= value then return opt(default) end
  return math.min(math.max(value, 0), TEN_YEARS)
end

-- Jobs that finished before the retained:* sets existed have no entry in
-- them: each call indexes up to BACKFILL of them, walking each finished
-- state's set by seq from where the last call stopped (retained:backfill,
-- state -> last seq walked; 'done' once every set was walked: jobs that
-- finish later are indexed as they finish).
local BACKFILL = 250
local walked = p .. 'retained:backfill'
if not redis.call('HGET', walked, 'done') then
  local budget, ended = BACKFILL, 0
  for _, state in ipairs({'completed', 'cancelled', 'dead'}) do
    local from = redis.call('HGET', walked, state)
    if from == 'end' then
      ended = ended + 1
    elseif budget > 0 then
      local found = redis.call('ZRANGE', state_key(p, state), from and '(' .. from or '-inf',
        '+inf', 'BYSCORE', 'LIMIT', 0, budget, 'WITHSCORES')
      local n = #found / 2
      for i = 1, #found, 2 do
        local at = redis.call('HGET', job_key(p, found[i]), 'finished_at')
        if at then redis.call('ZADD', p .. RETAINED[state], 'NX', at, found[i]) end
      end
      if n < budget then
        redis.call('HSET', walked, state, 'end')
        ended = ended + 1
      else
        redis.call('HSET', walked, state, found[#found])
      end
      budget = budget - n
    end
  end
  if ended == 3 then redis.call('HSET', walked, 'done', '1') end
end

local now = clock()
-- each retained set with its cutoff (false: kept forever)
local sets = {}
for _, kept in ipairs({{'retained:completed', keep_of('keep_completed', ARGV[2])},
                       {'retained:dead', keep_of('keep_dead', ARGV[3])}}) do
  if kept[2] then sets[#sets + 1] = {p .. kept[1], num(now - kept[2])} end
end

if limit == 0 then
  local due = 0
  for _, s in ipairs(sets) do due = due + redis.call('ZCOUNT', s[1], '-inf', s[2]) end
  return flow_reply({due, {}})
end
ck.forget_buckets(p, now)  -- the full rate buckets of idle concurrency keys go

local gone, by_state, left = {}, {}, limit
for _, s in ipairs(sets) do
  if left == 0 then break end
  local ids = redis.call('ZRANGE', s[1], '-inf', s[2], 'BYSCORE', 'LIMIT', 0, left)
  for _, id in ipairs(ids) do
    local state = redis.call('HGET', job_key(p, id), 'state')
    -- a job of the set is finished in that set's states; anything else (not
    -- found) is only an entry to drop
    if state and RETAINED[state] and p .. RETAINED[state] == s[1] then
      by_state[state] = by_state[state] or {}
      table.insert(by_state[state], id)
      gone[#gone + 1] = id
    end
  end
  call_with('ZREM', s[1], ids)
  left = left - #ids
end
local doomed = {}
for i, id in ipairs(gone) do
  doomed[2 * i - 1], doomed[2 * i] = job_key(p, id), history_key(p, id)
  -- a workflow's step: its edges go, and its record learns it is gone (_flow.lua)
  local f = redis.call('HMGET', job_key(p, id), 'wf', 'home', 'key', 'uf')
  -- a job enqueued with unique_for: its window closed
  if f[4] and redis.call('HGET', p .. 'ukeys', f[3]) == id then
    redis.call('HDEL', p .. 'ukeys', f[3])
  end
  if f[1] then
    redis.call('DEL', in_key(p, id), p .. 'spawns:' .. id)
    flow_send(p, {p = f[2], d = f[1], k = 'gone', s = id})
  end
end
for i = 1, #doomed, PIECE do
  redis.call('DEL', unpack(doomed, i, math.min(i + PIECE - 1, #doomed)))
end
for state, ids in pairs(by_state) do call_with('ZREM', state_key(p, state), ids) end
call_with('ZREM', p .. 'all', gone)
if KEYS[2] then call_with('HDEL', KEYS[2], gone) end
flow_run(p)
return flow_reply({#gone, gone})
