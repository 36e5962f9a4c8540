-- _lib.lua: helpers shared by tenure's scripts. The loader (scripts.py) puts
-- this file in front of each script, so every script is self-contained when it
-- is loaded and called by SHA. Nothing here runs on its own.
--
-- Conventions:
--   * KEYS[1] of a per-queue script is the queue's key prefix "<prefix>:{<queue>}:";
--     every key the script touches starts with it (one hash slot). keys.py
--     documents the layout that the *_key functions below build.
--   * Times are Redis's own clock (TIME), float seconds since the epoch, stored
--     with 17 significant digits so that they read back exactly.
--   * Status codes returned to Python (scripts.py maps them to exceptions):

local OK, NOT_FOUND, LEASE_LOST, INVALID_TRANSITION = 0, 1, 2, 3

local SIGNAL_MAX = 64             -- wake-up tokens kept per queue
local MAX_US = 9000000000000000   -- run_at and seq in µs fit 16 digits (and a double)

-- A workflow's step ended or was retried: its edges move (_flow.lua, put after
-- this file, defines it). A plain job's claim, completion and failure read
-- one field more (wf), in a read they make anyway.
local flow_ended
-- Concurrency keys: _keys.lua, put after this file, fills it.
local ck = {}

local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function num(x) return string.format('%.17g', x) end
local function int(x) return string.format('%d', x) end

-- An optional ARGV value: '' stands for None (no real value is empty).
local function opt(x) if x == '' then return nil end return x end

-- A job's fields in the order codec.job_of_values reads them (a claim's reply),
-- then its workflow (a step's: see claim_jobs) and its concurrency key.
local JOB_FIELDS = {'id', 'task', 'queue', 'args', 'state', 'priority', 'run_at', 'created_at',
  'attempts', 'stalls', 'max_attempts', 'timeout', 'fence', 'key', 'worker', 'lease_expires_at',
  'result', 'error', 'dead_reason', 'progress', 'finished_at', 'traceparent',
  'cancel_requested', 'recovered_from', 'budget_from', 'wf', 'ck'}

local function job_key(p, id) return p .. 'job:' .. id end
local function history_key(p, id) return p .. 'history:' .. id end
local function state_key(p, state) return p .. 'state:' .. state end
local function held_key(p, worker) return p .. 'held:' .. worker end

-- The member of the ready set: sorts by run_at, then seq, at equal priority.
-- Made again from the job's fields when needed, not stored: at 68 bytes it
-- was over hash-max-listpack-value, and made every job's hash a hash table.
-- run_at reads back exactly (17 digits), so the member made again is the same.
local function ready_member(run_at, seq, id)
  local us = math.floor(run_at * 1000000)
  if us < 0 then us = 0 elseif us > MAX_US then us = MAX_US end
  return string.format('%016d%016d', us, seq) .. id
end

-- Move a job between the per-state sets (from is nil for a new job). zset:
-- what runs the ZADD and ZREM, redis.call unless a caller defers them
-- (_flow.lua's flow_zset, a workflow's release of many steps).
local function set_state(p, id, seq, from, to, zset)
  zset = zset or redis.call
  if from then zset('ZREM', state_key(p, from), id) end
  zset('ZADD', state_key(p, to), seq, id)
end

-- Wake up to n idle workers (BLPOP on the signal list); the list stays short.
local function signal(p, n)
  if n <= 0 then return end
  local tokens = {}
  for i = 1, math.min(n, SIGNAL_MAX) do tokens[i] = '1' end
  redis.call('RPUSH', p .. 'signal', unpack(tokens))
  redis.call('LTRIM', p .. 'signal', -SIGNAL_MAX, -1)
end

-- The queue's stored policy, decoded (false when none is stored), read once
-- per queue and script call.
local policies = {}
local function policy_of(p)
  local policy = policies[p]
  if policy == nil then
    local raw = redis.call('GET', p .. 'policy')
    policy = raw and cjson.decode(raw) or false
    policies[p] = policy
  end
  return policy
end

-- -> queued, in line by its stored priority, run_at and seq (so a job queued
-- again keeps its place). The caller signals. f: those fields {run_at, seq,
-- priority, ck} when the caller read them, with a run_at to store (else read).
-- zset: as set_state's, for the ready set too.
local function queue_job(p, id, from, f, zset)
  zset = zset or redis.call
  local jk = job_key(p, id)
  if f then
    redis.call('HSET', jk, 'state', 'queued', 'run_at', num(f[1]))
  else
    f = redis.call('HMGET', jk, 'run_at', 'seq', 'priority', 'ck')
    redis.call('HSET', jk, 'state', 'queued')
    f[1] = tonumber(f[1])
  end
  local member = ready_member(f[1], tonumber(f[2]), id)
  zset('ZADD', p .. 'ready', -tonumber(f[3]), member)
  set_state(p, id, f[2], from, 'queued', zset)
  ck.added(p, f[4], {-tonumber(f[3]), member})
end

-- Wake an idle worker when the queue's earliest scheduled job will now come
-- due sooner than before (due is its run_at, before it is added): an idle
-- worker waits until the earliest one it saw comes due (wakeup.py).
local function signal_sooner(p, due)
  local head = redis.call('ZRANGE', p .. 'scheduled', 0, 0, 'WITHSCORES')
  if not head[2] or due < tonumber(head[2]) then signal(p, 1) end
end

-- -> scheduled, due at run_at.
local function schedule_job(p, id, run_at, from)
  local jk = job_key(p, id)
  redis.call('HSET', jk, 'state', 'scheduled', 'run_at', num(run_at))
  signal_sooner(p, run_at)
  redis.call('ZADD', p .. 'scheduled', run_at, id)
  set_state(p, id, redis.call('HGET', jk, 'seq'), from, 'scheduled')
end

-- scheduled -> queued for up to max jobs whose run_at has passed; returns how many.
local function promote(p, now, max)
  local due = redis.call('ZRANGEBYSCORE', p .. 'scheduled', '-inf', num(now), 'LIMIT', 0, max)
  for _, id in ipairs(due) do
    redis.call('ZREM', p .. 'scheduled', id)
    queue_job(p, id, 'scheduled')
  end
  return #due
end

-- Retention: the finished jobs of a queue by finished_at, one sorted set per
-- policy field that says how long they are kept (prune.lua deletes them).
local RETAINED = {completed = 'retained:completed', cancelled = 'retained:completed',
  dead = 'retained:dead'}

-- A finished job gives its key= back (if it still holds it); one enqueued
-- with unique_for (uf) holds it in ukeys for enqueues with unique_for, which
-- look at when it finished.
local function release_key(p, jk, id, f)
  f = f or redis.call('HMGET', jk, 'key', 'uf')
  local key = f[1]
  if key and redis.call('HGET', p .. 'keys', key) == id then
    redis.call('HDEL', p .. 'keys', key)
    if f[2] then redis.call('HSET', p .. 'ukeys', key, id) end
  end
end

-- When a finished job is due for retention: finished_at, or later for one
-- enqueued with unique_for (uf), kept while its window is open.
local function retained_at(now, uf)
  return num(now + (tonumber(uf) or 0))
end

-- redis.call(cmd, key, values...) for a list of values of any length, in
-- pieces (unpack has a limit); pieces hold an even count, so score-member
-- pairs stay whole.
local PIECE = 1000
local function call_with(cmd, key, values)
  for i = 1, #values, PIECE do
    redis.call(cmd, key, unpack(values, i, math.min(i + PIECE - 1, #values)))
  end
end

-- The fields of an active job that go when its attempt ends (recovered_from
-- too, which a recovery set for the attempt after it).
local LEASE_FIELDS = {'worker', 'lease_ttl', 'lease_expires_at', 'started_at', 'recovered_from'}

-- The leases of the jobs ids end, workers[i] holding ids[i] (false: none): out
-- of the lease set and the workers' held sets; no worker, no expiry, no
-- running attempt on the jobs. One call per set, whatever the number of jobs.
local function leave_active(p, ids, workers, cks)
  call_with('ZREM', p .. 'leases', ids)
  local held = {}
  for i, id in ipairs(ids) do
    redis.call('HDEL', job_key(p, id), unpack(LEASE_FIELDS))
    if cks[i] then ck.ended(p, cks[i]) end
    local worker = workers[i]
    if worker then
      held[worker] = held[worker] or {}
      table.insert(held[worker], id)
    end
  end
  for worker, of_worker in pairs(held) do
    local hk = held_key(p, worker)
    call_with('SREM', hk, of_worker)
    if redis.call('SCARD', hk) == 0 then redis.call('SREM', p .. 'holders', worker) end
  end
  -- Under max_active (or per key), an ended attempt is room for a job
  -- waiting: wake for it.
  if #ids > 0 then
    local policy = policy_of(p)
    if policy and (tonumber(policy.max_active) or tonumber(policy.max_active_per_key))
        and redis.call('ZCARD', p .. 'ready') > 0 then
      signal(p, #ids)
    end
  end
end

-- The job's key if (id, fence) is the current lease of an active job, else nil
-- and NOT_FOUND or LEASE_LOST. Fences compare as decimal strings.
local function held_job(p, id, fence)
  local jk = job_key(p, id)
  local f = redis.call('HMGET', jk, 'state', 'fence')
  if not f[1] then return nil, NOT_FOUND end
  if f[1] ~= 'active' or f[2] ~= fence then return nil, LEASE_LOST end
  return jk, OK
end

-- History: one JSON entry per attempt; times are strings, to keep 17 digits.
-- An attempt's entry is written once, when it ends; while it runs, the job
-- holds its start (started_at), number (attempts) and worker: a claim wrote
-- the entry and the end rewrote it, two calls per job more than needed.
local ATTEMPT_FIELDS = {'started_at', 'attempts', 'worker', 'fence'}

-- Lifecycle events (tenure.core.events): one stream per queue, p .. 'events'.
-- An entry holds the events of one kind that one script recorded for the
-- queue (a cycle's completions, its claims: an XADD per job cost the cycle a
-- seventh more): {k kind, j JSON array of job ids, d JSON array of each
-- event's data (absent: none has any)}; its id says when (Redis's clock, in
-- ms). Trimmed to the queue's events_max_count entries (MAXLEN ~: whole nodes
-- only, cheap); a queue whose policy says events = false records none. The
-- policy is read once per queue and call.
local EVENTS_MAX_COUNT = 100000  -- QueuePolicy.events_max_count's default

local events_kept = {}
local function events_of(p)
  local kept = events_kept[p]
  if kept == nil then
    local policy = policy_of(p)
    kept = EVENTS_MAX_COUNT
    if policy and policy.events == false then
      kept = false
    elseif policy and tonumber(policy.events_max_count) then
      kept = tonumber(policy.events_max_count)
    end
    events_kept[p] = kept
  end
  return kept
end

-- One entry: the events of kind of the jobs ids (a list), with data, the JSON
-- text of each event's data (a list), or nil when none has any.
local function append_events(p, kind, ids, data)
  if #ids == 0 then return end
  local kept = events_of(p)
  if not kept then return end
  local jobs = cjson.encode(ids)
  if data then
    redis.call('XADD', p .. 'events', 'MAXLEN', '~', kept, '*', 'k', kind, 'j', jobs,
      'd', '[' .. table.concat(data, ',') .. ']')
  else
    redis.call('XADD', p .. 'events', 'MAXLEN', '~', kept, '*', 'k', kind, 'j', jobs)
  end
end

local function record_event(p, kind, id, data)
  append_events(p, kind, {id}, data and {data} or nil)
end

-- The events Python decided (a JSON array of [kind, data or null]) of job id;
-- a workflow's step's (wf: its workflow) carry {"workflow": wf} too.
local function record_events(p, id, listed, wf)
  for _, e in ipairs(cjson.decode(listed)) do
    local data = e[2]
    if wf then
      if data == cjson.null then data = {} end
      data.workflow = wf
    end
    record_event(p, e[1], id, data ~= cjson.null and cjson.encode(data) or nil)
  end
end

-- The running attempt's entry (a table to encode) from its ATTEMPT_FIELDS.
local function attempt_entry(a)
  return {attempt = tonumber(a[2]), fence = tonumber(a[4]), worker = a[3] or nil,
    started_at = a[1]}
end

-- End the attempt whose ATTEMPT_FIELDS a were read before its end changed the
-- job. An attempt claimed by a version that wrote its entry at the claim has
-- no started_at: that entry is closed instead.
local function end_attempt(p, id, a, outcome, err, now)
  local hk = history_key(p, id)
  if a[1] then
    local entry = attempt_entry(a)
    entry.ended_at, entry.outcome, entry.error = num(now), outcome, err
    redis.call('RPUSH', hk, cjson.encode(entry))
    return
  end
  local last = redis.call('LINDEX', hk, -1)
  if not last then return end
  local entry = cjson.decode(last)
  if int(entry.fence) ~= a[4] or entry.ended_at then return end
  entry.ended_at, entry.outcome, entry.error = num(now), outcome, err
  redis.call('LSET', hk, -1, cjson.encode(entry))
end

-- active -> cancelled, once leave_active took its lease: the job was cancelled
-- while its attempt ran, and that attempt ended other than completed.
local function end_cancelled(p, id, jk, now, wf)
  redis.call('HSET', jk, 'state', 'cancelled', 'finished_at', num(now))
  local f = redis.call('HMGET', jk, 'key', 'uf', 'seq')
  set_state(p, id, f[3], 'active', 'cancelled')
  redis.call('ZADD', p .. RETAINED.cancelled, retained_at(now, f[2]), id)
  release_key(p, jk, id, f)
  flow_ended(p, id, jk, 'cancelled', wf)
end

-- Apply a decision of tenure.core.retry to an active job (fail, and the
-- sweeper's recover): -> queued | scheduled | dead | cancelled, and end the
-- attempt. A job whose cancel was requested is cancelled whatever the decision
-- (the worker that decided may not have known), with cancel_events (JSON, as
-- events) instead of the decision's.
local function settle_failure(p, id, jk, outcome, err, state, delay, reason, stall, now, events,
                              cancel_events)
  -- wf: a workflow's step; ck: its concurrency key
  local c = redis.call('HMGET', jk, 'cancel_requested', 'wf', 'ck', 'key', 'uf')
  if c[1] then
    state, events, stall = 'cancelled', cancel_events, false
  end
  local a = redis.call('HMGET', jk, unpack(ATTEMPT_FIELDS))
  leave_active(p, {id}, {a[3]}, {c[3]})
  if err then redis.call('HSET', jk, 'error', err) else redis.call('HDEL', jk, 'error') end
  if stall then redis.call('HINCRBY', jk, 'stalls', 1) end
  if state == 'cancelled' then
    end_cancelled(p, id, jk, now, c[2])
  elseif state == 'dead' then
    redis.call('HSET', jk, 'state', 'dead', 'dead_reason', reason, 'finished_at', num(now))
    set_state(p, id, redis.call('HGET', jk, 'seq'), 'active', 'dead')
    redis.call('ZADD', p .. RETAINED.dead, retained_at(now, c[5]), id)
    release_key(p, jk, id, {c[4], c[5]})
    flow_ended(p, id, jk, 'dead', c[2])
  elseif state == 'scheduled' then
    schedule_job(p, id, now + delay, 'active')
  else
    queue_job(p, id, 'active')
    signal(p, 1)
  end
  end_attempt(p, id, a, outcome, err, now)
  record_events(p, id, events, c[2])
end

-- The job and its history, as get returns them, with the running attempt's
-- entry (from the job) last.
local function job_with_history(p, id)
  local jk = job_key(p, id)
  local history = redis.call('LRANGE', history_key(p, id), 0, -1)
  local a = redis.call('HMGET', jk, unpack(ATTEMPT_FIELDS))
  if a[1] then history[#history + 1] = cjson.encode(attempt_entry(a)) end
  return {redis.call('HGETALL', jk), history}
end

-- The queue's lease TTL (nil for an at-most-once queue) from its stored policy,
-- else from the defaults the caller passes (config.py holds them, once).
local function lease_ttl_of(p, default_ttl, default_delivery)
  local policy = policy_of(p)
  local ttl, delivery = tonumber(default_ttl), default_delivery
  if policy then
    ttl = tonumber(policy.lease_ttl) or ttl
    delivery = policy.delivery or delivery
  end
  if delivery == 'at-most-once' then return nil end
  return ttl
end

-- The share of a claim of limit jobs the queue allows now, and its rate
-- bucket's tokens (nil without a rate_limit), as tenure.core.limits decides:
-- none while paused; no more than max_active leaves (its active jobs
-- counted), nor the bucket's whole tokens. The bucket, p .. 'rate' (HASH
-- tokens, at), holds up to rate_limit tokens and refills at rate_limit per
-- rate_interval seconds; absent, it is full.
local function share_of(p, limit, now)
  local policy = policy_of(p)
  if not policy then return limit, nil end
  if policy.paused == true then return 0, nil end
  local max_active = tonumber(policy.max_active)
  if max_active then
    limit = math.min(limit, max_active - redis.call('ZCARD', state_key(p, 'active')))
  end
  local tokens
  local rate = tonumber(policy.rate_limit)
  if rate then
    local b = redis.call('HMGET', p .. 'rate', 'tokens', 'at')
    tokens = rate
    if b[1] and b[2] then
      local per = tonumber(policy.rate_interval) or 1
      tokens = math.min(rate, tonumber(b[1]) + math.max(now - tonumber(b[2]), 0) * rate / per)
    end
    limit = math.min(limit, math.floor(tokens + 1e-9))
  end
  return math.max(limit, 0), tokens
end

-- The tasks a claim passes over, from its argument: a JSON array of task
-- names (those the worker has no handler for, in a rolling deploy), or ''
-- for none (nil: the claim reads no task name).
local function skip_set(arg)
  if arg == nil or arg == '' then return nil end
  local set = {}
  for _, task in ipairs(cjson.decode(arg)) do set[task] = true end
  return set
end

-- How far down a queue's ready set a claim that passes over some tasks looks
-- for jobs of others: a script blocks Redis, so many jobs passed over at the
-- head of a queue must not make every claim long. Past it, the claim takes
-- what it found.
local SKIP_SCAN_MAX = 1000

-- The best n entries of a queue's ready set, as flat {member, score} pairs,
-- passing over the jobs of the tasks in skip (a set from skip_set, or nil).
local function ready_entries(p, n, skip)
  if not skip then return redis.call('ZRANGE', p .. 'ready', 0, n - 1, 'WITHSCORES') end
  local found, start = {}, 0
  while #found < 2 * n and start < SKIP_SCAN_MAX do
    local stop = math.min(start + math.max(n, 100), SKIP_SCAN_MAX) - 1
    local page = redis.call('ZRANGE', p .. 'ready', start, stop, 'WITHSCORES')
    for i = 1, #page, 2 do
      local task = redis.call('HGET', job_key(p, string.sub(page[i], 33)), 'task')
      if not skip[task] and #found < 2 * n then
        found[#found + 1], found[#found + 2] = page[i], page[i + 1]
      end
    end
    if #page < 2 * (stop - start + 1) then break end  -- the set ends here
    start = stop + 1
  end
  return found
end

-- ---------------------------------------------------------------------------

-- Take up to limit due jobs of the queues (prefixes in keys), best first ->
-- active, promoting due scheduled jobs first (claim.lua, cycle.lua), passing
-- over the jobs of the tasks in skip (see ready_entries). Each job taken gets
-- fence + 1, attempts + 1, a lease of its queue's lease_ttl (none when
-- at-most-once) and a new attempt, begun at now (started_at). Returns the
-- JOB_FIELDS of each job taken.
local function claim_jobs(keys, worker, limit, default_ttl, default_delivery, promote_max, skip,
                          now)
  local now_s = num(now)
  local candidates, buckets, held_back = {}, {}, {}
  for q, p in ipairs(keys) do
    promote(p, now, promote_max)
    local share, tokens = share_of(p, limit, now)
    buckets[q] = tokens
    held_back[q] = share == 0
    if share > 0 then
      -- a keyed queue: the heads of its keys that may start (_keys.lua)
      local keyed = ck.mode(p)
      local ready = keyed and ck.select(p, share, skip, now) or ready_entries(p, share, skip)
      if keyed and #ready < 2 * share then held_back[q] = true end
      for i = 1, #ready, 2 do
        candidates[#candidates + 1] = {score = tonumber(ready[i + 1]), member = ready[i], q = q}
      end
    end
  end
  if #keys > 1 then
    -- priority first, then the member's run_at and seq: one order across queues
    table.sort(candidates, function(a, b)
      if a.score ~= b.score then return a.score < b.score end
      return a.member < b.member
    end)
  end
  -- per queue: its lease TTL, and what its sets gain and lose, written after
  -- the loop in one call per set
  local out, taken = {}, {}
  local worker_json = cjson.encode(worker)
  for i = 1, math.min(limit, #candidates) do
    local c = candidates[i]
    local p = keys[c.q]
    local t = taken[c.q]
    if not t then
      t = {ttl = lease_ttl_of(p, default_ttl, default_delivery), members = {}, ids = {},
        active = {}, leases = {}, started = {}, cks = {}}
      taken[c.q] = t
    end
    local id = string.sub(c.member, 33)
    local jk = job_key(p, id)
    -- the job as it was, then the fields the claim changes (JOB_FIELDS order)
    local f = redis.call('HMGET', jk, unpack(JOB_FIELDS))
    -- a workflow's step (wf, the 26th field): its workflow, upstream, may_fail, cancel_reason
    if f[26] then
      f[26] = {f[26], unpack(redis.call('HMGET', jk, 'up', 'may_fail', 'cancel_reason'))}
    end
    -- the last attempt's progress goes; so does a lease if this claim makes none
    local gone = {}
    if f[20] then gone[1] = 'progress' end
    if f[16] and not t.ttl then
      gone[#gone + 1], gone[#gone + 2] = 'lease_ttl', 'lease_expires_at'
    end
    if #gone > 0 then redis.call('HDEL', jk, unpack(gone)) end
    local fence, attempts = int(tonumber(f[13]) + 1), int(tonumber(f[9]) + 1)
    f[5], f[9], f[13], f[15], f[16], f[20] = 'active', attempts, fence, worker, false, false
    local fields = {'state', 'active', 'worker', worker, 'fence', fence, 'attempts', attempts,
      'started_at', now_s}
    if t.ttl then
      local expires = num(now + t.ttl)
      f[16] = expires
      fields[11], fields[12], fields[13], fields[14] = 'lease_ttl', num(t.ttl),
        'lease_expires_at', expires
      t.leases[#t.leases + 1], t.leases[#t.leases + 2] = expires, id
    end
    redis.call('HSET', jk, unpack(fields))
    t.started[#t.started + 1] = '{"attempt":' .. attempts .. ',"worker":' .. worker_json .. '}'
    t.members[#t.members + 1], t.ids[#t.ids + 1] = c.member, id
    t.cks[#t.ids] = f[27]
    t.active[#t.active + 1], t.active[#t.active + 2] = string.sub(c.member, 17, 32), id
    out[#out + 1] = f
  end
  for q, t in pairs(taken) do
    local p = keys[q]
    call_with('ZREM', p .. 'ready', t.members)
    ck.claimed(p, t.members, t.cks, now)
    call_with('ZADD', p .. 'leases', t.leases)
    call_with('ZREM', state_key(p, 'queued'), t.ids)
    call_with('ZADD', state_key(p, 'active'), t.active)
    call_with('SADD', held_key(p, worker), t.ids)
    redis.call('SADD', p .. 'holders', worker)
    append_events(p, 'started', t.ids, t.started)
    if buckets[q] then  -- each start takes a token
      redis.call('HSET', p .. 'rate', 'tokens', num(buckets[q] - #t.ids), 'at', now_s)
    end
  end
  -- A queue left empty has no claimable job, nor one held back by its limits:
  -- its wake-up tokens are stale (an enqueue, or an active job's end under
  -- max_active, pushes new ones), and an idle worker should not wake for nothing.
  for q, p in ipairs(keys) do
    if held_back[q] or redis.call('ZCARD', p .. 'ready') == 0 then
      redis.call('DEL', p .. 'signal')
    end
  end
  return out
end

-- active -> completed for the (id, fence, result) triples args[first..last] of
-- the queue p (complete.lua, cycle.lua). Returns one status per job, in order.
local function complete_jobs(p, args, first, last, now)
  local codes = {}
  local now_s = num(now)
  -- the jobs completed, their workers, their (seq, id) and (finished_at, id)
  -- pairs: the sets they leave and join are written after the loop, one call each
  local ids, workers, completed, retained, steps, wfs, cks = {}, {}, {}, {}, {}, {}, {}
  for i = first, last, 3 do
    local id, fence = args[i], args[i + 1]
    local jk = job_key(p, id)
    -- held_job, release_key and end_attempt's reads in one call: the
    -- ATTEMPT_FIELDS, then state, seq and key
    local a = redis.call('HMGET', jk, 'started_at', 'attempts', 'worker', 'fence', 'state',
      'seq', 'key', 'wf', 'ck', 'uf')
    local code = OK
    if not a[5] then
      code = NOT_FOUND
    elseif a[5] ~= 'active' or a[4] ~= fence then
      code = LEASE_LOST  -- also the second of two completions of one job in a batch
    else
      ids[#ids + 1] = id
      workers[#ids], cks[#ids] = a[3], a[9]
      completed[#completed + 1], completed[#completed + 2] = a[6], id
      retained[#retained + 1], retained[#retained + 2] = a[10] and retained_at(now, a[10])
        or now_s, id
      redis.call('HSET', jk, 'state', 'completed', 'result', args[i + 2], 'finished_at', now_s)
      if a[7] then release_key(p, jk, id, {a[7], a[10]}) end
      end_attempt(p, id, a, 'completed', nil, now)
      if a[8] then steps[#steps + 1], wfs[#ids] = id, a[8] end
    end
    codes[#codes + 1] = code
  end
  leave_active(p, ids, workers, cks)
  call_with('ZREM', state_key(p, 'active'), ids)
  call_with('ZADD', state_key(p, 'completed'), completed)
  call_with('ZADD', p .. RETAINED.completed, retained)
  local data = nil  -- a workflow's steps': {"workflow": id}
  if #steps > 0 then
    data = {}
    for i = 1, #ids do data[i] = wfs[i] and cjson.encode({workflow = wfs[i]}) or 'null' end
  end
  append_events(p, 'completed', ids, data)
  for i, id in ipairs(ids) do
    if wfs[i] then flow_ended(p, id, job_key(p, id), 'completed', wfs[i]) end
  end
  return codes
end
