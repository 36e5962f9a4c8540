-- spawn: the running step (id, fence) adds steps to its workflow: those
-- without upstream are queued at once, and each dependent of the step (the
-- workflow itself when the step is a sink) waits for the new sinks too, their
-- edges ordered right after the step's (spawn_ord). A spawn whose seq the
-- step made already returns its jobs and changes nothing.
--
-- KEYS[1]  the queue's key prefix (the step's; the new steps are in it too)
-- ARGV     job id, fence, seq, the queue's name, JSON {steps: as flow_enqueue.lua's,
--          sinks: [step id...]}
-- Returns  {{OK (0), {HGETALL} of each new job}, {NOT_FOUND (1)}, {LEASE_LOST
--          (2)} or {INVALID_TRANSITION (3)} (no workflow's step); {prefixes to
--          relay from}}

local p, id, fence, seq = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local jk, code = held_job(p, id, fence)
if not jk then return flow_reply({code}) end
local f = redis.call('HMGET', jk, 'wf', 'home')
if not f[1] then return flow_reply({INVALID_TRANSITION}) end
local sk = p .. 'spawns:' .. id
local made = redis.call('HGET', sk, seq)
local ids = {}
if made then
  ids = cjson.decode(made)
else
  local w = cjson.decode(ARGV[5])
  local now = clock()
  local last = tonumber(redis.call('GET', p .. 'seq') or '0')
  local now_us = math.floor(now * 1000000)
  for i, s in ipairs(w.steps) do
    last = math.max(now_us, last + 1)
    flow_write(p, ARGV[4], f[1], f[2], s, true, now, last)
    ids[i] = s.id
  end
  redis.call('SET', p .. 'seq', int(last))
  local edges = redis.call('HGETALL', out_key(p, id))
  for i = 1, #edges, 2 do
    local tp, d = string.match(edges[i], '^(%S+) (.*)$')
    local ord = words(edges[i + 1])[2]
    for k, sink in ipairs(w.sinks) do
      local o = string.format('%s.%06d.%06d', ord, seq, k - 1)
      redis.call('HSET', out_key(p, sink), edges[i], 'open ' .. o)
      flow_send(p, {p = tp, d = d, s = sink, k = 'add', o = o})
    end
  end
  flow_send(p, {p = f[2], d = f[1], k = 'job', ids = ids, n = last})
  redis.call('HSET', sk, seq, cjson.encode(ids))
  flow_run(p)
end
local out = {OK}
for i, new in ipairs(ids) do out[i + 1] = redis.call('HGETALL', job_key(p, new)) end
return flow_reply(out)
