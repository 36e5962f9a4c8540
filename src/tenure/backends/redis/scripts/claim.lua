-- claim: take up to limit due jobs of the listed queues, best first -> active.
-- Promotes the queues' due scheduled jobs first. Each job taken gets fence + 1,
-- attempts + 1, a lease of its queue's lease_ttl (none when at-most-once) and a
-- new attempt (its history entry is written when it ends).
--
-- KEYS     the key prefix of each queue, "<prefix>:{<queue>}:" (several queues:
--          several hash slots, which a single Redis allows; see docs/redis.md)
-- ARGV[1]  the worker id
-- ARGV[2]  limit
-- ARGV[3]  default lease_ttl, ARGV[4] default delivery (for queues without a policy)
-- ARGV[5]  how many due scheduled jobs to promote per queue, at most
-- ARGV[6]  the tasks whose jobs to pass over: a JSON array, or '' for none
--          (see ready_entries in _lib.lua)
-- Returns  the JOB_FIELDS (_lib.lua) of each job taken, best first

return claim_jobs(KEYS, ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5]),
                  skip_set(ARGV[6]), clock())
