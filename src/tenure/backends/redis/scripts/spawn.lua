-- spawn: the running step (id, fence) adds steps to its workflow: those
-- without upstream are queued at once, and each dependent of the step (the
-- workflow itself when the step is a sink) waits for the new sinks too, their
-- edges ordered right after the step's (spawn_ord). Steps of this queue are
-- written here; those of other queues by a message each ('steps', _flow.lua),
-- sent before the step's own end can be: its dependents learn of the new
-- edges first. A spawn whose seq the step made already changes nothing.
--
-- KEYS[1]  the step's queue's key prefix
-- ARGV     job id, fence, seq, JSON {parts: [{queue, prefix, kinds, steps: as
--          flow_enqueue.lua's}...], sinks: [step id...], sources: [step id...]}
-- Returns  {{OK (0), the ids of the spawn's steps without upstream...},
--          {NOT_FOUND (1)}, {LEASE_LOST (2)} or {INVALID_TRANSITION (3)} (no
--          workflow's step); {prefixes to relay from}, {}}

local p, id, fence, seq = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local jk, code = held_job(p, id, fence)
if not jk then return flow_reply({code}) end
local f = redis.call('HMGET', jk, 'wf', 'home')
if not f[1] then return flow_reply({INVALID_TRANSITION}) end
local sk = p .. 'spawns:' .. id
local made = redis.call('HGET', sk, seq)
if made then return flow_reply({OK, unpack(cjson.decode(made))}) end

local w = cjson.decode(ARGV[4])
local by_id, ids = {}, {}
for _, part in ipairs(w.parts) do
  for _, s in ipairs(part.steps) do
    by_id[s[S_ID]] = s
    ids[#ids + 1] = s[S_ID]
  end
end
-- the step's dependents wait for the spawn's sinks too
local out = redis.call('HGET', jk, 'out')
for _, e in ipairs(out and cjson.decode(out) or {}) do
  local d, tp, ord = e[1], e[2], e[3]
  for k, sink in ipairs(w.sinks) do
    local o = string.format('%s.%06d.%06d', ord, seq, k - 1)
    table.insert(by_id[sink][S_OUT], {d, tp, o})
    flow_send(p, {p = tp, d = d, s = sink, k = 'add', o = o})
  end
end
local now = clock()
for _, part in ipairs(w.parts) do
  if part.prefix == p then
    local last = tonumber(redis.call('GET', p .. 'seq') or '0')
    local now_us = math.floor(now * 1000000)
    local kinds = flow_kinds(part.kinds, part.queue, f[1], f[2], now)
    for _, s in ipairs(part.steps) do
      last = math.max(now_us, last + 1)
      flow_write(p, f[1], kinds, s, true, now, last)
    end
    redis.call('SET', p .. 'seq', int(last))
  else
    flow_send(p, {p = part.prefix, k = 'steps', queue = part.queue, wf = f[1], home = f[2],
      by = id, seq = seq, kinds = part.kinds, steps = part.steps})
  end
end
flow_send(p, {p = f[2], d = f[1], k = 'job', ids = ids, n = math.floor(now * 1000000)})
redis.call('HSET', sk, seq, cjson.encode(w.sources))
flow_run(p)
return flow_reply({OK, unpack(w.sources)})
