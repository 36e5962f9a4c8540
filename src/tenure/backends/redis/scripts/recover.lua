-- recover: apply the sweeper's decisions (made by tenure.core.retry in Python)
-- to the attempts it found stalled or crashed: active -> queued | scheduled | dead
-- (| cancelled: a job whose cancel was requested, whatever the decision).
-- Each one is fence-checked, and checked again for what made it a candidate: a
-- stalled lease must still be expired (a late heartbeat saves it), a crashed one
-- must still belong to the same worker. Those that changed are left alone.
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  n; then 12 values per attempt: job id, fence, worker, outcome
--          (stalled | crashed), error, state, delay, dead_reason (''), stall ('1'),
--          events (JSON: [[kind, data or null], ...], see tenure.core.events),
--          the events if its job's cancel was requested, recovered_from (when the
--          lease was last proven; '': unknown, or dead)
-- Returns  {the ids of the jobs recovered, in order, {prefixes to relay from}}

local p, n = KEYS[1], tonumber(ARGV[1])
local now = clock()
local done = {}
for i = 0, n - 1 do
  local b = 2 + i * 12
  local id, fence, worker, outcome = ARGV[b], ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
  local jk = job_key(p, id)
  local f = redis.call('HMGET', jk, 'state', 'fence', 'worker', 'lease_expires_at')
  local current = f[1] == 'active' and f[2] == fence and f[3] == worker
  if current and outcome == 'stalled' then
    current = f[4] and tonumber(f[4]) <= now
  end
  if current then
    settle_failure(p, id, jk, outcome, ARGV[b + 4], ARGV[b + 5], tonumber(ARGV[b + 6]),
      opt(ARGV[b + 7]), ARGV[b + 8] == '1', now, ARGV[b + 9], ARGV[b + 10])
    if ARGV[b + 11] ~= '' and redis.call('HGET', jk, 'state') ~= 'cancelled' then
      redis.call('HSET', jk, 'recovered_from', ARGV[b + 11])
    end
    done[#done + 1] = id
  end
end
return flow_reply(done)
