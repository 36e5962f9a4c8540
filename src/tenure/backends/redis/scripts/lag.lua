-- lag: how long the queue's oldest due job has been due, by Redis's clock.
-- Queued jobs: the ready set sorts by priority (its score), then by run_at
-- (its member), so the first member of each distinct score is the oldest of
-- its priority: one seek per priority, at most 100 of them. Scheduled jobs:
-- the first one due that no sweep or claim promoted yet.
--
-- KEYS[1]  the queue's key prefix
-- Returns  the seconds (17 significant digits), '0' when no job is due

local p = KEYS[1]
local now = clock()
local oldest = nil
local first = redis.call('ZRANGE', p .. 'ready', 0, 0, 'WITHSCORES')
local seen = 0
while first[1] and seen < 100 do
  local run_at = tonumber(string.sub(first[1], 1, 16)) / 1000000
  if not oldest or run_at < oldest then oldest = run_at end
  first = redis.call('ZRANGEBYSCORE', p .. 'ready', '(' .. first[2], '+inf', 'WITHSCORES',
    'LIMIT', 0, 1)
  seen = seen + 1
end
local due = redis.call('ZRANGEBYSCORE', p .. 'scheduled', '-inf', num(now), 'WITHSCORES',
  'LIMIT', 0, 1)
if due[1] and (not oldest or tonumber(due[2]) < oldest) then oldest = tonumber(due[2]) end
if not oldest then return '0' end
return num(math.max(now - oldest, 0))
