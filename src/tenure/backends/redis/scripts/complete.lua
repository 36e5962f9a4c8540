-- complete: active -> completed, with a JSON result, for one job or a batch.
--
-- KEYS[1]  the queue's key prefix
-- ARGV     triples: job id, fence, result (JSON)
-- Returns  one status per job, in order: OK (0), NOT_FOUND (1) or LEASE_LOST
--          (2: stale fence; that job is left unchanged)

local p = KEYS[1]
local now = clock()
local codes = {}
for i = 1, #ARGV, 3 do
  local id, fence = ARGV[i], ARGV[i + 1]
  local jk, code = held_job(p, id, fence)
  if jk then
    leave_active(p, jk, id)
    redis.call('HSET', jk, 'state', 'completed', 'result', ARGV[i + 2], 'finished_at', num(now))
    set_state(p, id, redis.call('HGET', jk, 'seq'), 'active', 'completed')
    release_key(p, jk, id)
    end_attempt(p, id, fence, 'completed', nil, now)
  end
  codes[#codes + 1] = code
end
return codes
