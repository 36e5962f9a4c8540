-- complete: active -> completed, with a JSON result, for one job or a batch.
--
-- KEYS[1]  the queue's key prefix
-- ARGV     triples: job id, fence, result (JSON)
-- Returns  {one status per job, in order: OK (0), NOT_FOUND (1) or LEASE_LOST
--          (2: stale fence; that job is left unchanged), {prefixes to relay
--          from}} (_flow.lua)

return flow_reply(complete_jobs(KEYS[1], ARGV, 1, #ARGV, clock()))
