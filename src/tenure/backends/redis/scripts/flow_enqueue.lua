-- flow_enqueue: store a workflow's steps of one queue (all waiting; those
-- without upstream released at once with commit), and in its home queue the
-- workflow's record (running with commit, else pending until flow_commit.lua;
-- a pending record is abandoned after a while: sweep.lua). The key= of a
-- workflow is checked here, in its home queue: while a workflow holding it is
-- running (or pending), that one is the answer and nothing is stored.
--
-- KEYS[1]  the queue's key prefix
-- ARGV[1]  the queue's name
-- ARGV[2]  JSON {wf: id, home: home queue's prefix, commit: bool, at: absent (the
--          home queue's call: now), or the home queue's call's now (the others),
--          record: absent (not the home queue), or {key: key or '', many: bool,
--          sinks: [[step id, ord]...], jobs: [every step id, in order],
--          starts: [[prefix, [step id...]]...] (its steps without upstream)},
--          kinds: [...], steps: [...]}: the steps and their shared options
--          (_flow.lua: flow_kinds, flow_write; flows.py)
-- Returns  {{OK (0), '', now (its steps' created_at)} or {OK, the id of the
--          workflow that holds the key}, {prefixes to relay from}}

local p, queue = KEYS[1], ARGV[1]
local w = cjson.decode(ARGV[2])
local now = w.at and tonumber(w.at) or clock()
local r = w.record
if r then
  local rk = wf_key(p, w.wf)
  if r.key ~= '' then
    local holder = redis.call('HGET', p .. 'wfkeys', r.key)
    local state = holder and redis.call('HGET', wf_key(p, holder), 'state')
    if state == 'running' or state == 'pending' then return flow_reply({OK, holder}) end
    redis.call('HSET', p .. 'wfkeys', r.key, w.wf)
  end
  local sinks = {}
  for i, e in ipairs(r.sinks) do
    redis.call('HSET', in_key(p, w.wf), e[1], 'open 0 ' .. e[2])
    sinks[i] = e[1]
  end
  redis.call('HSET', rk, 'id', w.wf, 'state', w.commit and 'running' or 'pending',
    'created_at', num(now), 'many', r.many and '1' or '0', 'pending', #sinks, 'blocked', 0,
    'sinks', cjson.encode(sinks), 'starts', cjson.encode(r.starts))
  if r.key ~= '' then redis.call('HSET', rk, 'key', r.key) end
  if w.commit then wf_counted(p, nil, 'running') end
  local ranked = {}
  for i, id in ipairs(r.jobs) do ranked[2 * i - 1], ranked[2 * i] = i, id end
  call_with('ZADD', p .. 'wfjobs:' .. w.wf, ranked)
  if not w.commit then redis.call('ZADD', p .. 'wfpending', num(now), w.wf) end
end
local last = tonumber(redis.call('GET', p .. 'seq') or '0')
local now_us = math.floor(now * 1000000)
local kinds = flow_kinds(w.kinds, queue, w.wf, w.home, now)
flow_batching()
for _, s in ipairs(w.steps) do
  last = math.max(now_us, last + 1)
  flow_write(p, w.wf, kinds, s, w.commit, now, last)
end
flow_flush()
redis.call('SET', p .. 'seq', int(last))
return flow_reply({OK, '', num(now)})
