-- heartbeat: renew the presented leases that the worker still holds, in one call.
-- An at-most-once job has no lease to renew but is reported held all the same.
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  the worker id; then pairs (job id, fence)
-- Returns  the (job id, fence, cancel requested: 1 or 0) triples still held,
--          flat; the caller reports the others lost

local p, worker = KEYS[1], ARGV[1]
local now = clock()
local held = {}
for i = 2, #ARGV, 2 do
  local id, fence = ARGV[i], ARGV[i + 1]
  local jk = job_key(p, id)
  local f = redis.call('HMGET', jk, 'state', 'fence', 'worker', 'lease_ttl', 'cancel_requested')
  if f[1] == 'active' and f[2] == fence and f[3] == worker then
    if f[4] then
      local expires = now + tonumber(f[4])
      redis.call('HSET', jk, 'lease_expires_at', num(expires))
      redis.call('ZADD', p .. 'leases', expires, id)
    end
    held[#held + 1] = id
    held[#held + 1] = fence
    held[#held + 1] = f[5] and 1 or 0
  end
end
return held
