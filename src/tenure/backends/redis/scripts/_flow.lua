-- _flow.lua: workflows (tenure.core.workflows), put after _lib.lua in front of
-- every script. keys.py lays out the keys; the why, in short:
--
--   * an edge lives twice: in its source's job hash, field out (JSON
--     [[dep, dep's prefix, ord, state (absent: open)]...], what the source
--     decided: a key of its own per step was much of a store's cost) and in its
--     dependent's in:<dep> (HASH source id -> "<state> <version> <ord>", what
--     the dependent applied); the dependent (a job, or the workflow record
--     wf:<id>) counts its edges not done (pending) and failed (blocked);
--   * a step's transition moves its out edges and sends one message per edge
--     moved: {p = the dependent's prefix, d = dependent, s = source, e = new
--     state, v = the source's flow version (fv, +1 at each such transition)}.
--     A message to this script's slot is applied here, at once (a worklist:
--     a cascade never recurses); one to another slot goes to this slot's
--     outbox, atomically with the transition, and the caller relays it
--     (apply.lua in the target's slot, then LREM). Applying keeps per edge the
--     last version applied and ignores older or equal ones, so a message
--     applied twice, or late, changes nothing;
--   * other messages: k = 'add' (a spawn's new edge, ord o), 'starts' (a
--     committed workflow's sources of the slot, ids: release them as of at,
--     its created_at; 'start', one source d, from an earlier version), 'job' (the workflow record
--     gains the spawned jobs ids, ordered by n), 'gone' (a step was pruned),
--     'steps' (a spawn's steps of another queue, with their kinds: write them).

local EARLY_TTL = 86400  -- seconds an edge to a step not written (yet) is kept

local flow_work, flow_running = {}, false
local flow_relays, flow_relay_set = {}, {}  -- prefixes whose outbox got messages
local flow_forgotten = {}  -- workflows deleted (pruned): the caller drops them from the fleet's map

local function in_key(p, id) return p .. 'in:' .. id end
local function wf_key(p, id) return p .. 'wf:' .. id end

-- The home queue's count of its workflows by state (workflow_counts): a
-- record's state left ``from`` and entered ``to`` (nil: none; a pending or
-- dropped record is no workflow yet, and is not counted). An end also
-- counts in wfended, by outcome, for good (workflow_outcomes).
local COUNTED = {running = true, completed = true, failed = true, cancelled = true}
local function wf_counted(p, from, to)
  if from and COUNTED[from] then redis.call('HINCRBY', p .. 'wfcount', from, -1) end
  if to and COUNTED[to] then redis.call('HINCRBY', p .. 'wfcount', to, 1) end
  if to and to ~= 'running' and COUNTED[to] then redis.call('HINCRBY', p .. 'wfended', to, 1) end
end
local function is_wf(id) return string.sub(id, 1, 3) == 'wf-' end

-- Events and wake-ups of many steps stored or released in one go (a
-- workflow's store, its sources' release): recorded once per queue and kind
-- at the end (flow_flush), not an XADD and a signal per step. nil: at once.
local flow_batch = nil

-- The batch's entry of group (events, sets) for (a, b): made the first time,
-- kept in that order (group.order), no string made to find it.
local function flow_entry(group, a, b)
  local of_a = group.by[a]
  if not of_a then
    of_a = {}
    group.by[a] = of_a
  end
  local e = of_a[b]
  if not e then
    e = {a = a, b = b, values = {}, data = {}}
    of_a[b] = e
    group.order[#group.order + 1] = e
  end
  return e
end

local function flow_event(p, kind, id, data)
  if not flow_batch then return record_event(p, kind, id, data) end
  local e = flow_entry(flow_batch.events, p, kind)
  local n = #e.values + 1
  e.values[n], e.data[n] = id, data
end

local function flow_signal(p)
  if not flow_batch then return signal(p, 1) end
  flow_batch.signals[p] = (flow_batch.signals[p] or 0) + 1
end

-- Start a batch; true if this call started it (and so flushes it).
local function flow_batching()
  if flow_batch then return false end
  flow_batch = {events = {by = {}, order = {}}, sets = {by = {}, order = {}}, signals = {}}
  return true
end

-- redis.call(cmd, key, a, b): a ZADD of score a, member b, or a ZREM of
-- member a; now or (batching) at the flush, one call per command and key.
-- Only for a sorted set the rest of the call neither reads nor changes, and
-- members it does not both add and remove.
local function flow_zset(cmd, key, a, b)
  if not flow_batch then
    if b == nil then return redis.call(cmd, key, a) end
    return redis.call(cmd, key, a, b)
  end
  local values = flow_entry(flow_batch.sets, cmd, key).values
  values[#values + 1] = a
  if b then values[#values + 1] = b end
end

local function flow_flush()
  for _, e in ipairs(flow_batch.sets.order) do call_with(e.a, e.b, e.values) end
  for _, e in ipairs(flow_batch.events.order) do append_events(e.a, e.b, e.values, e.data) end
  for p, n in pairs(flow_batch.signals) do signal(p, n) end
  flow_batch = nil
end

local function words(s)
  local t = {}
  for w in string.gmatch(s, '%S+') do t[#t + 1] = w end
  return t
end

local flow_apply  -- below: apply one message in slot p

-- Apply every message of the worklist (unless a caller up the stack does).
local function flow_run(p)
  if flow_running then return end
  flow_running = true
  local i = 1
  while flow_work[i] do
    flow_apply(p, flow_work[i])
    i = i + 1
  end
  flow_work, flow_running = {}, false
end

-- Put a message in slot p's outbox, for the caller to relay.
local function flow_post(p, m)
  redis.call('RPUSH', p .. 'outbox', cjson.encode(m))
  if not flow_relay_set[p] then
    flow_relay_set[p] = true
    flow_relays[#flow_relays + 1] = p
  end
end

-- Apply a message here (its target's slot is this one), or post it.
local function flow_send(p, m)
  if m.p == p then
    flow_work[#flow_work + 1] = m
    return
  end
  flow_post(p, m)
end

-- The step id (in slot p) ended: to is the state of its open edges now
-- ('done' | 'failed'), or nil when it was retried from the DLQ (its failed
-- edges open again). Runs the cascade.
local function flow_moved(p, id, jk, to)
  local v = redis.call('HINCRBY', jk, 'fv', 1)
  local out = redis.call('HGET', jk, 'out')
  local edges, moved = out and cjson.decode(out) or {}, false
  for _, e in ipairs(edges) do
    local state, new = e[4] or 'open', nil
    if to and state == 'open' then new = to elseif not to and state == 'failed' then new = 'open' end
    if new then
      e[4], moved = new, true
      flow_send(p, {p = e[2], d = e[1], s = id, e = new, v = v})
    end
  end
  if moved then redis.call('HSET', jk, 'out', cjson.encode(edges)) end
  flow_run(p)
end

-- How a step's open edges end when it ends dead or cancelled.
local function failed_edge(jk)
  return redis.call('HGET', jk, 'may_fail') and 'done' or 'failed'
end

-- A step's event data: {"workflow": id} and more (a JSON text).
local function flow_data(wf, more)
  local d = more or {}
  d.workflow = wf
  return cjson.encode(d)
end

-- waiting -> queued, or scheduled when its delay (from now) or run_at is later.
-- at: a source released as of its workflow's store (created_at), as a job
-- enqueued then: due at its run_at, else at + its delay (what the store's
-- answer says, and the SQL backends do).
local RELEASE_FIELDS = {'wdelay', 'wat', 'wf', 'seq', 'priority', 'ck'}
local ready_data = {}  -- a ready event's data, by workflow
local function flow_release(p, id, jk, now, event, at, f)
  f = f or redis.call('HMGET', jk, unpack(RELEASE_FIELDS))
  local due
  if at then
    due, now = tonumber(f[2]) or at + (tonumber(f[1]) or 0), at
  else
    due = now + (tonumber(f[1]) or 0)
    if f[2] then due = math.max(due, tonumber(f[2])) end
  end
  if due > now then
    redis.call('HSET', jk, 'run_at', num(due))
    schedule_job(p, id, due, 'waiting')
  else
    queue_job(p, id, 'waiting', {due, f[4], f[5], f[6]}, flow_zset)
    flow_signal(p)
  end
  if event then
    ready_data[f[3]] = ready_data[f[3]] or flow_data(f[3])
    flow_event(p, 'ready', id, ready_data[f[3]])
  end
end

-- A dependent job after its counters moved: released, cancelled (upstream
-- failed), or waiting again. at: see flow_release.
local function flow_settle_job(p, id, jk, now, at)
  local f = redis.call('HMGET', jk, 'state', 'pending', 'blocked', 'cancel_reason', 'wf', 'seq',
    'wdelay', 'wat', 'priority', 'ck')
  local pending, blocked = tonumber(f[2]) or 0, tonumber(f[3]) or 0
  if f[1] == 'waiting' and blocked > 0 then
    redis.call('HSET', jk, 'state', 'cancelled', 'cancel_reason', 'upstream_failed',
      'finished_at', num(now))
    set_state(p, id, f[6], 'waiting', 'cancelled')
    redis.call('ZADD', p .. RETAINED.cancelled, num(now), id)
    record_event(p, 'cancelled', id, flow_data(f[5], {reason = 'upstream_failed'}))
    flow_moved(p, id, jk, failed_edge(jk))
  elseif f[1] == 'waiting' and pending == 0 then
    flow_release(p, id, jk, now, true, at, {f[7], f[8], f[5], f[6], f[9], f[10]})
  elseif f[1] == 'cancelled' and f[4] == 'upstream_failed' and blocked == 0 then
    redis.call('HSET', jk, 'state', 'waiting')
    redis.call('HDEL', jk, 'cancel_reason', 'finished_at')
    set_state(p, id, f[6], 'cancelled', 'waiting')
    redis.call('ZREM', p .. RETAINED.cancelled, id)
    record_event(p, 'waiting', id, flow_data(f[5]))
    flow_moved(p, id, jk, nil)
    if pending == 0 then flow_release(p, id, jk, now, true) end
  end
end

-- The workflow record after its sink counters moved; by: the step that moved them.
local function flow_settle_wf(p, id, rk, by, now)
  local f = redis.call('HMGET', rk, 'state', 'pending', 'blocked', 'key')
  if f[1] ~= 'running' and f[1] ~= 'failed' and f[1] ~= 'completed' then return end
  local new = 'running'
  if tonumber(f[3]) > 0 then new = 'failed' elseif tonumber(f[2]) == 0 then new = 'completed' end
  if new == f[1] then return end
  wf_counted(p, f[1], new)
  if new == 'running' then
    redis.call('HSET', rk, 'state', new)
    redis.call('HDEL', rk, 'finished_at')
    return
  end
  redis.call('HSET', rk, 'state', new, 'finished_at', num(now))
  record_event(p, 'workflow_ended', by, flow_data(id, {outcome = new}))
  if f[4] and redis.call('HGET', p .. 'wfkeys', f[4]) == id then
    redis.call('HDEL', p .. 'wfkeys', f[4])
  end
end

-- The workflow record and its keys go once it ended and its last job is gone.
local function flow_forget_wf(p, id, rk)
  local state = redis.call('HGET', rk, 'state')
  if state ~= 'completed' and state ~= 'failed' and state ~= 'cancelled' then return end
  if redis.call('SCARD', p .. 'wfgone:' .. id) < redis.call('ZCARD', p .. 'wfjobs:' .. id) then
    return
  end
  redis.call('DEL', rk, in_key(p, id), p .. 'wfjobs:' .. id, p .. 'wfgone:' .. id)
  wf_counted(p, state, nil)
  flow_forgotten[#flow_forgotten + 1] = id
end

-- The upstream ids of a dependent, by their edges' ord (its 'up' field, or
-- the workflow's 'sinks').
local function flow_order(p, id, rk, field)
  local edges = redis.call('HGETALL', in_key(p, id))
  local sorted = {}
  for i = 1, #edges, 2 do sorted[#sorted + 1] = {words(edges[i + 1])[3] or '', edges[i]} end
  table.sort(sorted, function(a, b) return a[1] < b[1] end)
  local ids = {}
  for i, e in ipairs(sorted) do ids[i] = e[2] end
  redis.call('HSET', rk, field, cjson.encode(ids))
end

-- An edge message: state e at version v, or k = 'add' (a new open edge).
local function flow_edge(p, m, rk, wf, now)
  local ik = in_key(p, m.d)
  local cur = redis.call('HGET', ik, m.s)
  local old = cur and words(cur)
  local field = wf and 'sinks' or 'up'
  if m.k == 'add' then
    if cur then
      if not old[3] then
        redis.call('HSET', ik, m.s, old[1] .. ' ' .. old[2] .. ' ' .. m.o)
        flow_order(p, m.d, rk, field)
      end
      return
    end
    redis.call('HSET', ik, m.s, 'open 0 ' .. m.o)
    redis.call('HINCRBY', rk, 'pending', 1)
    flow_order(p, m.d, rk, field)
  else
    if old and tonumber(old[2]) >= tonumber(m.v) then return end
    local was = old and old[1]
    local dp = (m.e ~= 'done' and 1 or 0) - ((was and was ~= 'done') and 1 or 0)
    local db = (m.e == 'failed' and 1 or 0) - (was == 'failed' and 1 or 0)
    redis.call('HSET', ik, m.s, m.e .. ' ' .. m.v .. (old and old[3] and ' ' .. old[3] or ''))
    if dp ~= 0 then redis.call('HINCRBY', rk, 'pending', dp) end
    if db ~= 0 then redis.call('HINCRBY', rk, 'blocked', db) end
  end
  if wf then flow_settle_wf(p, m.d, rk, m.s, now) else flow_settle_job(p, m.d, rk, now) end
end

-- A step as flow_enqueue.lua, spawn.lua and a 'steps' message carry it
-- (flows.py): {id, args (JSON text), in: [[source id, ord]...], out:
-- [[dependent id, its prefix, ord]...], kind}, kind indexing (from 0) its
-- part's kinds: {task, priority, delay, wat, max_attempts, timeout,
-- traceparent, ck, may_fail} ('' = none), the options its steps share, sent
-- and turned into fields once per part, not per step.
local S_ID, S_ARGS, S_IN, S_OUT, S_KIND = 1, 2, 3, 4, 5

-- The fields of each kind's steps, but their id, args and seq (slots 2, 4,
-- 6: flow_write fills them). A step without upstream has no up, pending or
-- blocked (read as none and 0), one without delay no wdelay.
local function flow_kinds(kinds, queue, wf, home, now)
  local now_s, built = num(now), {}
  for i, k in ipairs(kinds) do
    local run_at = k.wat ~= '' and k.wat or now_s  -- until its release sets it
    local f = {'id', '', 'args', '', 'seq', '', 'task', k.task, 'queue', queue,
      'priority', k.priority, 'run_at', run_at, 'created_at', now_s, 'fence', 0,
      'attempts', 0, 'stalls', 0, 'state', 'waiting', 'wf', wf, 'home', home}
    for _, name in ipairs({'max_attempts', 'timeout', 'traceparent', 'wat', 'ck'}) do
      if k[name] ~= '' then f[#f + 1], f[#f + 2] = name, k[name] end
    end
    if k.delay ~= '' then f[#f + 1], f[#f + 2] = 'wdelay', k.delay end
    if k.may_fail then f[#f + 1], f[#f + 2] = 'may_fail', '1' end
    built[i] = {fields = f, n = #f, task = k.task, enqueued = {}}  -- enqueued: event data
  end
  return built
end

-- A step's edges in, all open: none moved before it was written (no in:
-- hash yet), as for every step of a new workflow. One HSET for them all.
local function flow_write_in(ik, edges, up)
  local pairs_ = {}
  for i, e in ipairs(edges) do
    pairs_[2 * i - 1], pairs_[2 * i], up[i] = e[1], 'open 0 ' .. e[2], e[1]
  end
  call_with('HSET', ik, pairs_)
end

-- A step's edges in when some may have moved before it was written (a
-- spawn's, from another queue): they count as they stand. Its pending and
-- blocked counts.
local function flow_write_early(ik, edges, up)
  local pending, blocked, early = 0, 0, false
  for i, e in ipairs(edges) do
    local cur = redis.call('HGET', ik, e[1])
    local state, version = 'open', '0'
    if cur then
      local w = words(cur)
      state, version, early = w[1], w[2], true
    end
    redis.call('HSET', ik, e[1], state .. ' ' .. version .. ' ' .. e[2])
    if state ~= 'done' then pending = pending + 1 end
    if state == 'failed' then blocked = blocked + 1 end
    up[i] = e[1]
  end
  if early then redis.call('PERSIST', ik) end
  return pending, blocked, early
end

-- Write step s of workflow wf (kinds: flow_kinds's for its part) as waiting;
-- with start, one without upstream is released at once (no ready event).
local function flow_write(p, wf, kinds, s, start, now, last)
  local id, ins, kind = s[S_ID], s[S_IN], kinds[s[S_KIND] + 1]
  local jk, seq = job_key(p, id), int(last)
  local fields, n, early = kind.fields, kind.n, false
  fields[2], fields[4], fields[6] = id, s[S_ARGS], seq
  if #ins > 0 then
    local ik, up, pending, blocked = in_key(p, id), {}, #ins, 0
    if redis.call('EXISTS', ik) == 0 then
      flow_write_in(ik, ins, up)
    else
      pending, blocked, early = flow_write_early(ik, ins, up)
    end
    fields[n + 1], fields[n + 2], fields[n + 3] = 'up', cjson.encode(up), 'pending'
    fields[n + 4], fields[n + 5], fields[n + 6] = pending, 'blocked', blocked
    n = n + 6
  end
  if #s[S_OUT] > 0 then
    fields[n + 1], fields[n + 2], n = 'out', cjson.encode(s[S_OUT]), n + 2
  end
  redis.call('HSET', jk, unpack(fields, 1, n))
  if start then
    redis.call('ZADD', p .. 'all', seq, id)
    set_state(p, id, seq, nil, 'waiting')
  else  -- nothing in this call moves it: in the batch's ZADDs, if one is on
    flow_zset('ZADD', p .. 'all', seq, id)
    flow_zset('ZADD', state_key(p, 'waiting'), seq, id)
  end
  if start and #ins == 0 then
    flow_release(p, id, jk, now, false, now)
  elseif start and early then
    flow_settle_job(p, id, jk, now)
  end
  local state = start and redis.call('HGET', jk, 'state') or 'waiting'
  local data = kind.enqueued[state]
  if not data then
    data = flow_data(wf, {task = kind.task, state = state})
    kind.enqueued[state] = data
  end
  flow_event(p, 'enqueued', id, data)
end

-- The steps a spawn in another queue made in this one (once per spawn).
local function flow_spawned(p, m, now)
  local made = p .. 'spawns:' .. m.by
  if redis.call('HSETNX', made, m.seq, '1') == 0 then return end
  redis.call('EXPIRE', made, EARLY_TTL)
  local last = tonumber(redis.call('GET', p .. 'seq') or '0')
  local now_us = math.floor(now * 1000000)
  local kinds = flow_kinds(m.kinds, m.queue, m.wf, m.home, now)
  for _, s in ipairs(m.steps) do
    last = math.max(now_us, last + 1)
    flow_write(p, m.wf, kinds, s, true, now, last)
  end
  redis.call('SET', p .. 'seq', int(last))
end

-- An edge message to a step not written yet (a spawn's, in another queue: the
-- message that writes it is on its way) or not any more (pruned): kept for
-- a while, for the former (flow_write counts it).
local function flow_early(p, m)
  local ik = in_key(p, m.d)
  local cur = redis.call('HGET', ik, m.s)
  if m.k == 'add' then
    if not cur then redis.call('HSET', ik, m.s, 'open 0') end
  elseif not cur or tonumber(words(cur)[2]) < tonumber(m.v) then
    redis.call('HSET', ik, m.s, m.e .. ' ' .. m.v)
  end
  redis.call('EXPIRE', ik, EARLY_TTL)
end

flow_apply = function(p, m)
  local now = clock()
  if m.k == 'steps' then return flow_spawned(p, m, now) end
  if m.k == 'starts' then
    local mine = flow_batching()
    for _, id in ipairs(m.ids) do  -- one gone (dropped) reads as none: nothing to do
      flow_settle_job(p, id, job_key(p, id), now, tonumber(m.at))
    end
    if mine then flow_flush() end
    return
  end
  local wf = is_wf(m.d)
  local rk = wf and wf_key(p, m.d) or job_key(p, m.d)
  if redis.call('EXISTS', rk) == 0 then
    if not wf and (m.k == nil or m.k == 'add') then flow_early(p, m) end
    return
  end
  if m.k == 'start' then
    flow_settle_job(p, m.d, rk, now)
  elseif m.k == 'job' then
    for i, id in ipairs(m.ids) do redis.call('ZADD', p .. 'wfjobs:' .. m.d, 'NX', m.n + i, id) end
  elseif m.k == 'gone' then
    redis.call('SADD', p .. 'wfgone:' .. m.d, m.s)
    flow_forget_wf(p, m.d, rk)
  else
    flow_edge(p, m, rk, wf, now)
  end
end

-- A step of slot p ended (state 'completed' | 'dead' | 'cancelled'), or was
-- retried from the DLQ ('queued'): its edges move. wf: its workflow (false
-- for a plain job) when the caller read it, else nil (read here).
flow_ended = function(p, id, jk, state, wf)
  if wf == nil then wf = redis.call('HGET', jk, 'wf') end
  if not wf then return end
  local to = nil
  if state == 'completed' then to = 'done' elseif state ~= 'queued' then to = failed_edge(jk) end
  flow_moved(p, id, jk, to)
end

-- A script's reply, with the prefixes whose outbox the caller relays from,
-- and the workflows it deleted (relay.py).
local function flow_reply(reply)
  return {reply, flow_relays, flow_forgotten}
end
