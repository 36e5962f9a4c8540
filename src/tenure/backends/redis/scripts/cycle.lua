-- cycle: the worker's round trip in one script: complete jobs, then claim.
-- Only where all its keys may meet in one script (not on Redis Cluster, where
-- the worker pipelines complete.lua and claim.lua instead).
--
-- KEYS     the prefixes of the queues to claim from (ARGV[7] of them), then
--          the prefix of each queue with completions, in the order of ARGV's groups
-- ARGV[1..6] as claim.lua: worker id, limit, default lease_ttl, default delivery,
--          how many due scheduled jobs to promote per queue, tasks to pass over
-- ARGV[7]  how many of KEYS are queues to claim from
-- ARGV[8..] per queue with completions: n, then n triples (job id, fence, result)
-- Returns  {claimed jobs as claim.lua returns them, {statuses as complete.lua
--          returns them, one list per queue with completions}, {prefixes to
--          relay from (_flow.lua)}}

local now = clock()
local claiming = tonumber(ARGV[7])
local statuses = {}
local i = 8
for k = claiming + 1, #KEYS do
  local n = tonumber(ARGV[i])
  statuses[#statuses + 1] = complete_jobs(KEYS[k], ARGV, i + 1, i + 3 * n, now)
  i = i + 1 + 3 * n
end
local claimed = {}
local limit = tonumber(ARGV[2])
if limit > 0 and claiming > 0 then
  local keys = {}
  for k = 1, claiming do keys[k] = KEYS[k] end
  claimed = claim_jobs(keys, ARGV[1], limit, ARGV[3], ARGV[4], tonumber(ARGV[5]),
                       skip_set(ARGV[6]), now)
end
return {claimed, statuses, flow_relays}
