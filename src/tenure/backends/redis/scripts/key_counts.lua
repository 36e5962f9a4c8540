-- key_counts: a queue's concurrency keys with queued or active jobs, from what
-- the claim keeps per key (_keys.lua): kload, kact; the jobs without a key are
-- the queue's counts less the keys' (a read of every key's count, never of
-- the jobs).
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  at most this many keys (most queued + active first, then by key)
-- Returns  {queued, active} of the jobs without a key, then key, queued,
--          active for each key

local p, limit = KEYS[1], tonumber(ARGV[1])
local loads = redis.call('ZRANGE', p .. 'kload', 0, -1, 'WITHSCORES')
local queued, active = 0, 0
for i = 2, #loads, 2 do queued = queued - tonumber(loads[i]) end
for _, n in ipairs(redis.call('HVALS', p .. 'kact')) do active = active + tonumber(n) end
queued = queued - active
local out = {redis.call('ZCARD', p .. 'ready') - queued,
  redis.call('ZCARD', state_key(p, 'active')) - active}
for i = 1, math.min(#loads, 2 * limit), 2 do
  local a = tonumber(redis.call('HGET', p .. 'kact', loads[i]) or '0')
  out[#out + 1], out[#out + 2], out[#out + 3] = loads[i], -tonumber(loads[i + 1]) - a, a
end
return out
