-- get: one job with its history.
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  job id
-- Returns  {{HGETALL}, {history entries}}; the HGETALL is empty when absent

return job_with_history(KEYS[1], ARGV[1])
