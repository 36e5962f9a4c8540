-- peek: the best claimable jobs of one queue, for a claim over several queues
-- on Redis Cluster (where one script cannot see several queues): the caller
-- merges the queues' candidates, then claims from each queue its share.
-- Promotes the queue's due scheduled jobs first, as a claim would.
--
-- KEYS[1]  the queue's key prefix
-- ARGV     limit, how many due scheduled jobs to promote at most, the tasks
--          whose jobs to pass over (as claim.lua's ARGV[6])
-- Returns  flat pairs {member of the ready set, score}, best first

local p = KEYS[1]
local now = clock()
promote(p, now, tonumber(ARGV[2]))
if ck.mode(p) then return ck.select(p, tonumber(ARGV[1]), skip_set(ARGV[3]), now) end
return ready_entries(p, tonumber(ARGV[1]), skip_set(ARGV[3]))
