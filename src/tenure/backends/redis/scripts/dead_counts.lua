-- dead_counts: how many of a piece of the queue's dead jobs died of each
-- reason. The caller walks the dead jobs by seq, a piece per call, so that no
-- call holds Redis for long however many jobs are dead.
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  the seq of the last dead job a previous piece looked at; '': none
-- ARGV[2]  how many dead jobs to look at
-- Returns  {the seq of the last job looked at ('' when none are left), reason, n, ...}

local p = KEYS[1]
local size = tonumber(ARGV[2])
local from = ARGV[1] == '' and '-inf' or '(' .. ARGV[1]
local found = redis.call('ZRANGEBYSCORE', state_key(p, 'dead'), from, '+inf', 'WITHSCORES',
  'LIMIT', 0, size)
local counts, reasons = {}, {}
for i = 1, #found, 2 do
  local reason = redis.call('HGET', job_key(p, found[i]), 'dead_reason')
  if reason then
    if not counts[reason] then
      counts[reason] = 0
      reasons[#reasons + 1] = reason
    end
    counts[reason] = counts[reason] + 1
  end
end
local out = {#found == 2 * size and found[#found] or ''}
for _, reason in ipairs(reasons) do
  out[#out + 1] = reason
  out[#out + 1] = counts[reason]
end
return out
