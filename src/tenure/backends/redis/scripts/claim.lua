-- claim: take up to limit due jobs of the listed queues, best first -> active.
-- Promotes the queues' due scheduled jobs first. Each job taken gets fence + 1,
-- attempts + 1, a lease of its queue's lease_ttl (none when at-most-once) and a
-- new attempt in its history.
--
-- KEYS     the key prefix of each queue, "<prefix>:{<queue>}:" (several queues:
--          several hash slots, which a single Redis allows; see docs/redis.md)
-- ARGV[1]  the worker id
-- ARGV[2]  limit
-- ARGV[3]  default lease_ttl, ARGV[4] default delivery (for queues without a policy)
-- ARGV[5]  how many due scheduled jobs to promote per queue, at most
-- Returns  one HGETALL per job taken, best first

local worker, limit = ARGV[1], tonumber(ARGV[2])
local now = clock()
local candidates = {}
for q, p in ipairs(KEYS) do
  promote(p, now, tonumber(ARGV[5]))
  local ready = redis.call('ZRANGE', p .. 'ready', 0, limit - 1, 'WITHSCORES')
  for i = 1, #ready, 2 do
    candidates[#candidates + 1] = {score = tonumber(ready[i + 1]), member = ready[i], q = q}
  end
end
if #KEYS > 1 then
  -- priority first, then the member's run_at and seq: one order across queues
  table.sort(candidates, function(a, b)
    if a.score ~= b.score then return a.score < b.score end
    return a.member < b.member
  end)
end

local out, ttls = {}, {}
for i = 1, math.min(limit, #candidates) do
  local c = candidates[i]
  local p = KEYS[c.q]
  if ttls[c.q] == nil then ttls[c.q] = lease_ttl_of(p, ARGV[3], ARGV[4]) or false end
  local ttl = ttls[c.q]
  local id = string.sub(c.member, 33)
  local seq = string.sub(c.member, 17, 32)
  local jk = job_key(p, id)
  redis.call('ZREM', p .. 'ready', c.member)
  local f = redis.call('HMGET', jk, 'fence', 'attempts')
  local fence, attempts = tonumber(f[1]) + 1, tonumber(f[2]) + 1
  local fields = {'state', 'active', 'worker', worker, 'fence', fence, 'attempts', attempts}
  if ttl then
    local expires = now + ttl
    fields[9], fields[10], fields[11], fields[12] = 'lease_ttl', num(ttl), 'lease_expires_at',
      num(expires)
    redis.call('ZADD', p .. 'leases', expires, id)
    redis.call('HDEL', jk, 'progress', 'rank')
  else
    redis.call('HDEL', jk, 'progress', 'rank', 'lease_ttl', 'lease_expires_at')
  end
  redis.call('HSET', jk, unpack(fields))
  set_state(p, id, seq, 'queued', 'active')
  redis.call('SADD', held_key(p, worker), id)
  redis.call('SADD', p .. 'holders', worker)
  begin_attempt(p, id, attempts, fence, worker, now)
  out[#out + 1] = redis.call('HGETALL', jk)
end
-- A queue left empty has no claimable job: its wake-up tokens are stale (an
-- enqueue pushes new ones), and an idle worker should not wake for nothing.
for q, p in ipairs(KEYS) do
  if redis.call('ZCARD', p .. 'ready') == 0 then
    redis.call('DEL', p .. 'signal')
  end
end
return out
