-- sweep: the sweeper's first look at one queue. Promotes due scheduled jobs,
-- and returns the candidates for recovery: leases that expired by Redis's clock
-- (stalled) and the workers that hold leases, whose liveness the caller judges.
-- Changes nothing else: decisions come from tenure.core.retry, then recover.lua
-- applies them. Cost: the jobs promoted and returned, not the queue's size.
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  at most this many promotions and candidates
-- ARGV[2]  the seconds after which a pending workflow is abandoned (_flow.lua)
-- Returns  {promoted, {holder worker ids}, policy JSON or '', {HGETALL of each
--          job whose lease expired}, messages in the queue's outbox (a relay
--          that did not finish: the caller relays them), {ids of the workflows
--          homed here that stayed pending longer than ARGV[2] (a producer that
--          died while storing it: the caller drops them)}}

local p, max = KEYS[1], tonumber(ARGV[1])
local now = clock()
local promoted = promote(p, now, max)
signal(p, promoted)
local expired = redis.call('ZRANGEBYSCORE', p .. 'leases', '-inf', num(now), 'LIMIT', 0, max)
local jobs = {}
for i, id in ipairs(expired) do jobs[i] = redis.call('HGETALL', job_key(p, id)) end
local abandoned = redis.call('ZRANGEBYSCORE', p .. 'wfpending', '-inf', num(now - tonumber(ARGV[2])),
  'LIMIT', 0, max)
return {promoted, redis.call('SMEMBERS', p .. 'holders'), redis.call('GET', p .. 'policy') or '',
  jobs, redis.call('LLEN', p .. 'outbox'), abandoned}
